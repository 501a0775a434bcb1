//! The Kafka sink: `custos collect --kafka BROKERS --topic T` sends every line
//! of the stream (events, loss records, stats, seals) to a Kafka topic,
//! one message per line, unchanged, so seals still verify downstream.
//!
//! Identity: each message carries the host id (`/etc/machine-id` or
//! `--host-id`) and the boot id (the stream's last `boot` line) in its
//! headers, and `HOST/BOOT` as its key, so one boot's stream lands in one
//! partition, in order (the producer is idempotent: retries neither reorder
//! nor duplicate).
//!
//! Bounds: the lines reach this sink through the store's bounded queue
//! (custos_store::sink), and the producer holds at most `buffer_messages` /
//! `buffer_kib` not yet acknowledged. While the broker is away that buffer
//! fills; a line that finds it full waits up to `full_wait`, then is dropped
//! and counted, and so are the lines after it while the buffer stays full
//! (without waiting: an outage must not stall the collector's other
//! outputs). When a line fits again, a `loss` record with `category`
//! `"kafka"` goes first, counting what was dropped (docs/event-schema.md):
//! loss in-band, never silence, never unbounded memory. Reconnection is
//! librdkafka's: it retries the broker for as long as the sink runs.

use anyhow::{bail, Context, Result};
use custos_store::record::{parse_line, Record};
use custos_store::sink::LineTarget;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Message headers naming the line's origin.
pub const HOST_HEADER: &str = "custos-host";
pub const BOOT_HEADER: &str = "custos-boot";

/// The `category` of the loss records this sink writes.
pub const LOSS_CATEGORY: &str = "kafka";

/// How long a new producer may take to deliver its first line before a
/// full buffer counts as an outage.
const STARTUP_WAIT: Duration = Duration::from_secs(10);

/// Default bound of messages the producer holds unacknowledged.
pub const DEFAULT_BUFFER_MESSAGES: usize = 100_000;
/// Default bound of their bytes (KiB).
pub const DEFAULT_BUFFER_KIB: usize = 64 << 10;

#[derive(Debug, Clone)]
pub struct KafkaOptions {
    /// `bootstrap.servers`: `host:port[,host:port...]`.
    pub brokers: String,
    pub topic: String,
    /// This host's identity (see [`host_id`]).
    pub host_id: String,
    /// Messages held unacknowledged, at most (librdkafka's
    /// `queue.buffering.max.messages`).
    pub buffer_messages: usize,
    /// Their bytes, at most (KiB; `queue.buffering.max.kbytes`).
    pub buffer_kib: usize,
    /// How long a full buffer may go without the broker acknowledging
    /// anything before lines are dropped. A slow broker thus gets
    /// back-pressure (the collector waits, as for any sink); an absent one
    /// costs this wait once per outage.
    pub full_wait: Duration,
    /// At the end, how long to wait for the broker to take what is buffered.
    pub flush_timeout: Duration,
}

impl KafkaOptions {
    pub fn new(brokers: &str, topic: &str, host_id: &str) -> KafkaOptions {
        KafkaOptions {
            brokers: brokers.into(),
            topic: topic.into(),
            host_id: host_id.into(),
            buffer_messages: DEFAULT_BUFFER_MESSAGES,
            buffer_kib: DEFAULT_BUFFER_KIB,
            full_wait: Duration::from_secs(1),
            flush_timeout: Duration::from_secs(30),
        }
    }
}

/// This host's identity: `given` (`--host-id`) if any, else `/etc/machine-id`.
pub fn host_id(given: Option<&str>) -> Result<String> {
    let id = match given {
        Some(id) => id.to_string(),
        None => std::fs::read_to_string("/etc/machine-id")
            .context("reading /etc/machine-id for the host's identity (give one with --host-id)")?
            .trim()
            .to_string(),
    };
    check_id("host id", &id)?;
    Ok(id)
}

/// Ids travel in message keys (`HOST/BOOT`) and ClickHouse keys: printable, no `/`.
fn check_id(what: &str, id: &str) -> Result<()> {
    if id.is_empty()
        || id.len() > 128
        || id
            .chars()
            .any(|c| c == '/' || c.is_control() || c.is_whitespace())
    {
        bail!("{what} {id:?} must be 1 to 128 printable characters without spaces or '/'");
    }
    Ok(())
}

/// Lines dropped and not yet reported in a loss record.
#[derive(Debug, Default, Clone, Copy)]
struct Dropped {
    lines: u64,
    events: u64,
    /// Window of the dropped lines' times (their `time_ns`, or when dropped).
    start_ns: u64,
    end_ns: u64,
}

impl Dropped {
    fn add(&mut self, line: &[u8]) {
        let (is_event, time_ns) = event_and_time(line);
        let t = time_ns.unwrap_or_else(now_ns);
        if self.lines == 0 {
            (self.start_ns, self.end_ns) = (t, t);
        }
        self.lines += 1;
        self.events += is_event as u64;
        self.start_ns = self.start_ns.min(t);
        self.end_ns = self.end_ns.max(t);
    }

    fn merge(&mut self, other: &Dropped) {
        if other.lines == 0 {
            return;
        }
        if self.lines == 0 {
            *self = *other;
            return;
        }
        self.lines += other.lines;
        self.events += other.events;
        self.start_ns = self.start_ns.min(other.start_ns);
        self.end_ns = self.end_ns.max(other.end_ns);
    }

    /// The in-band record (docs/event-schema.md, `loss`): `count` is the
    /// events lost; `lines` all lines, stats and seals too.
    fn record(&self, boot: &str) -> String {
        format!(
            r#"{{"type":"loss","category":"{LOSS_CATEGORY}","boot_id":{},"count":{},"lines":{},"start_ns":{},"end_ns":{}}}"#,
            serde_json::Value::from(boot),
            self.events,
            self.lines,
            self.start_ns,
            self.end_ns
        )
    }
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Whether a line is an event, and its time: read with the store's parser
/// (only for lines that are dropped, so the cost falls in an outage).
fn event_and_time(line: &[u8]) -> (bool, Option<u64>) {
    match std::str::from_utf8(line).ok().map(parse_line) {
        Some(Ok(Record::Event(e, _))) => (true, Some(e.time_ns)),
        Some(Ok(Record::Loss(l))) => (false, Some(l.start_ns)),
        Some(Ok(Record::Stats { time_ns, .. })) => (false, Some(time_ns)),
        _ => (false, None),
    }
}

/// One of this sink's loss records, read back (its delivery failed: what it
/// reported is lost still, and must be reported again).
fn own_loss(line: &[u8]) -> Option<Dropped> {
    #[derive(serde::Deserialize)]
    struct Own {
        #[serde(rename = "type")]
        kind: String,
        category: String,
        count: u64,
        lines: u64,
        start_ns: u64,
        end_ns: u64,
    }
    // Cheap first: most lines are not ours.
    memchr::memmem::find(line, br#""category":"kafka""#)?;
    let o: Own = serde_json::from_slice(line).ok()?;
    (o.kind == "loss" && o.category == LOSS_CATEGORY).then_some(Dropped {
        lines: o.lines,
        events: o.count,
        start_ns: o.start_ns,
        end_ns: o.end_ns,
    })
}

/// Counts the lines the broker never took (delivery failed for good: with
/// an unlimited `message.timeout.ms` that is a rejected message, or the
/// purge of what was left when the sink ended).
struct Delivery {
    failed: Mutex<Dropped>,
    /// Loss records of ours that failed, and how many.
    returned: Mutex<(Dropped, u64)>,
    delivered: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl ClientContext for Delivery {}

impl ProducerContext for Delivery {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Err((err, msg)) => {
                let line = msg.payload().unwrap_or_default();
                match own_loss(line) {
                    Some(own) => {
                        let mut r = self.returned.lock().unwrap();
                        r.0.merge(&own);
                        r.1 += 1;
                    }
                    None => self.failed.lock().unwrap().add(line),
                }
                *self.last_error.lock().unwrap() = Some(err.to_string());
            }
        }
    }
}

/// What the sink did, for the collector's closing report.
#[derive(Debug, Default, Clone)]
pub struct KafkaSummary {
    /// Lines handed to the producer (loss records of its own included).
    pub sent: u64,
    /// Lines the broker acknowledged.
    pub delivered: u64,
    /// Lines dropped (buffer full or delivery failed), and the events among them.
    pub dropped_lines: u64,
    pub dropped_events: u64,
    /// Loss records written in-band.
    pub loss_records: u64,
    /// Dropped lines that no loss record in the topic reports (the broker
    /// was still away at the end): reported here only.
    pub unreported_lines: u64,
    pub unreported_events: u64,
}

/// The sink's end of the store's writer thread ([`custos_store::sink::LiveSink::spawn`]).
pub struct KafkaTarget {
    opts: KafkaOptions,
    producer: ThreadedProducer<Delivery>,
    boot: String,
    key: String,
    /// Dropped lines whose loss record is not yet sent.
    pending: Dropped,
    /// The buffer was full at the last line: drop without waiting.
    outage: bool,
    summary: KafkaSummary,
}

impl KafkaTarget {
    pub fn connect(opts: KafkaOptions) -> Result<KafkaTarget> {
        check_id("host id", &opts.host_id)?;
        if opts.topic.is_empty() {
            bail!("--topic must not be empty");
        }
        if opts.buffer_messages == 0 || opts.buffer_kib == 0 {
            bail!("the Kafka buffer bounds must be at least 1");
        }
        let delivery = Delivery {
            failed: Mutex::default(),
            returned: Mutex::default(),
            delivered: AtomicU64::new(0),
            last_error: Mutex::default(),
        };
        let producer: ThreadedProducer<Delivery> = ClientConfig::new()
            .set("bootstrap.servers", &opts.brokers)
            // Retries keep order and add no duplicates.
            .set("enable.idempotence", "true")
            // Never give up on a buffered line: the buffer's bound decides
            // loss, counted here, not a timer inside librdkafka.
            .set("message.timeout.ms", "0")
            .set(
                "queue.buffering.max.messages",
                opts.buffer_messages.to_string(),
            )
            .set("queue.buffering.max.kbytes", opts.buffer_kib.to_string())
            .set("linger.ms", "20")
            // Back within a second of the broker's return (librdkafka's default is 10 s).
            .set("reconnect.backoff.max.ms", "1000")
            .set("compression.type", "lz4")
            // An outage is expected and counted; librdkafka's retries are not news.
            .set("log_level", "3")
            .create_with_context(delivery)
            .with_context(|| format!("connecting a Kafka producer to {}", opts.brokers))?;
        let key = format!("{}/unknown", opts.host_id);
        Ok(KafkaTarget {
            opts,
            producer,
            boot: "unknown".into(),
            key,
            pending: Dropped::default(),
            outage: false,
            summary: KafkaSummary::default(),
        })
    }

    /// Sends one line: `Ok(true)` if the producer took it, `Ok(false)` if its
    /// buffer stayed full and the broker acknowledged nothing for `wait`.
    fn send(&mut self, line: &[u8], wait: Duration) -> Result<bool> {
        let delivered = || self.producer.context().delivered.load(Ordering::Relaxed);
        let (mut seen, mut progress_at) = (delivered(), Instant::now());
        // A new producer acknowledges nothing for a second or two (it looks
        // up the topic and gets its producer id): not an outage yet.
        let wait = if seen == 0 && wait > Duration::ZERO {
            wait.max(STARTUP_WAIT)
        } else {
            wait
        };
        loop {
            let headers = OwnedHeaders::new()
                .insert(Header {
                    key: HOST_HEADER,
                    value: Some(self.opts.host_id.as_bytes()),
                })
                .insert(Header {
                    key: BOOT_HEADER,
                    value: Some(self.boot.as_bytes()),
                });
            let record = BaseRecord::to(&self.opts.topic)
                .key(self.key.as_bytes())
                .payload(line)
                .headers(headers);
            match self.producer.send(record) {
                Ok(()) => {
                    self.summary.sent += 1;
                    return Ok(true);
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    let now = delivered();
                    if now != seen {
                        (seen, progress_at) = (now, Instant::now());
                    } else if progress_at.elapsed() >= wait {
                        return Ok(false);
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                // One line refused (too large, say): dropped and counted like the rest.
                Err((KafkaError::MessageProduction(code), _))
                    if code != RDKafkaErrorCode::Fatal =>
                {
                    eprintln!("custos collect: kafka: a line was refused ({code}): dropped, counted in-band");
                    return Ok(false);
                }
                Err((e, _)) => bail!("sending to Kafka topic {}: {e}", self.opts.topic),
            }
        }
    }

    /// Takes in the lines whose delivery failed since the last look.
    fn collect_failed(&mut self) {
        let (returned, records) =
            std::mem::take(&mut *self.producer.context().returned.lock().unwrap());
        self.pending.merge(&returned);
        self.summary.loss_records -= records;
        let failed = std::mem::take(&mut *self.producer.context().failed.lock().unwrap());
        if failed.lines > 0 {
            self.summary.dropped_lines += failed.lines;
            self.summary.dropped_events += failed.events;
            self.pending.merge(&failed);
            if let Some(e) = self.producer.context().last_error.lock().unwrap().take() {
                eprintln!(
                    "custos collect: kafka: {} lines not delivered ({e}): counted",
                    failed.lines
                );
            }
        }
    }

    /// Sends the pending loss record, if any; false if the buffer is full.
    fn report_pending(&mut self, wait: Duration) -> Result<bool> {
        self.collect_failed();
        if self.pending.lines == 0 {
            return Ok(true);
        }
        let record = self.pending.record(&self.boot);
        if !self.send(record.as_bytes(), wait)? {
            return Ok(false);
        }
        self.summary.loss_records += 1;
        if self.outage {
            eprintln!("custos collect: kafka: sending again; {} lines ({} events) were dropped, reported in-band", self.pending.lines, self.pending.events);
        }
        self.pending = Dropped::default();
        Ok(true)
    }

    fn drop_line(&mut self, line: &[u8]) {
        let mut d = Dropped::default();
        d.add(line);
        self.summary.dropped_lines += 1;
        self.summary.dropped_events += d.events;
        self.pending.merge(&d);
        if !self.outage {
            eprintln!(
                "custos collect: kafka: nothing acknowledged and the buffer full (broker {} away?): dropping lines, counted in-band",
                self.opts.brokers
            );
        }
        self.outage = true;
    }
}

impl LineTarget for KafkaTarget {
    type Summary = KafkaSummary;

    fn line(&mut self, line: &[u8]) -> Result<()> {
        if memchr::memmem::find(line, br#""type":"boot""#).is_some() {
            if let Some(Ok(Record::Boot(boot))) = std::str::from_utf8(line).ok().map(parse_line) {
                check_id("boot id", &boot)?;
                self.key = format!("{}/{boot}", self.opts.host_id);
                self.boot = boot;
            }
        }
        let wait = if self.outage {
            Duration::ZERO
        } else {
            self.opts.full_wait
        };
        // The loss record goes before the lines after the gap, or nothing does.
        if self.report_pending(wait)? && self.send(line, wait)? {
            self.outage = false;
        } else {
            self.drop_line(line);
        }
        Ok(())
    }

    fn tick(&mut self) -> Result<()> {
        // A quiet stream reports a failed delivery without waiting for its next line.
        self.report_pending(Duration::ZERO)?;
        Ok(())
    }

    fn finish(mut self) -> Result<KafkaSummary> {
        // One deadline for both: the loss record's wait and the flush.
        let deadline = Instant::now() + self.opts.flush_timeout;
        self.report_pending(self.opts.flush_timeout)?;
        let timeout = deadline.saturating_duration_since(Instant::now());
        if let Err(e) = self.producer.flush(timeout) {
            eprintln!(
                "custos collect: kafka: the broker did not take everything within {:?}: {e}",
                self.opts.flush_timeout
            );
        }
        // What is still buffered will not reach the broker: purge it, so the
        // delivery reports count it.
        self.producer
            .purge(rdkafka::producer::PurgeConfig::default().queue().inflight());
        let _ = self.producer.flush(Duration::from_secs(1));
        self.collect_failed();
        self.summary.unreported_lines = self.pending.lines;
        self.summary.unreported_events = self.pending.events;
        self.summary.delivered = self.producer.context().delivered.load(Ordering::Relaxed);
        Ok(self.summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVENT: &str = r#"{"type":"event","id":281474976710657,"cpu":1,"seq":1,"time_ns":2000,"pid":10,"tid":10,"syscall":"read","fd":3}"#;

    #[test]
    fn a_loss_record_of_dropped_lines_reads_back_through_the_store_parser() {
        let mut d = Dropped::default();
        d.add(EVENT.as_bytes());
        d.add(EVENT.replace("2000", "1000").as_bytes());
        d.add(br#"{"type":"stats","time_ns":3000,"produced":5}"#);
        let line = d.record("b-1");
        match parse_line(&line).unwrap() {
            Record::Loss(l) => {
                assert_eq!(
                    (l.count, l.start_ns, l.end_ns, l.category.as_str()),
                    (2, 1000, 3000, LOSS_CATEGORY)
                );
                assert_eq!(l.boot_id.as_deref(), Some("b-1"));
            }
            other => panic!("not a loss record: {other:?}"),
        }
        // A loss record of ours that failed is lost again, with what it counted.
        let back = own_loss(line.as_bytes()).unwrap();
        assert_eq!(
            (back.lines, back.events, back.start_ns, back.end_ns),
            (3, 2, 1000, 3000)
        );
        assert!(own_loss(EVENT.as_bytes()).is_none());
    }

    #[test]
    fn host_ids_that_would_break_the_key_are_refused() {
        assert!(host_id(Some("web-7")).is_ok());
        for bad in ["", "a/b", "a b", "x\n"] {
            let err = host_id(Some(bad)).unwrap_err().to_string();
            assert!(err.contains("printable"), "{bad:?}: {err}");
        }
    }
}
