//! `--metrics ADDR`: a daemon's statistics for Prometheus
//! (docs/operations.md, "Metrics"), for the collector and the scheduler.
//!
//! The values are the daemon's `--stats` ones: its loop computes its
//! statistics with the function that makes its stderr lines, and hands a
//! copy to [`Publisher::publish`]. A thread of its own answers the scrapes
//! from the last copy, encoded by the daemon's [`Encode`] function, so a
//! slow or hostile scraper never holds up the daemon (the collector's rings'
//! consumer): it only ever *tries* the lock (a scrape holds it for the
//! length of one clone), and skips a periodic copy if it is taken. The server answers one connection at a
//! time, reads at most [`MAX_REQUEST`] bytes of it and gives up on it after
//! [`IO_TIMEOUT`]: its memory and its thread count are bounded.
//!
//! The text is the OpenMetrics exposition, made by the `prometheus-client`
//! crate from the copy at each scrape (a [`Collector`]): no counter is kept
//! twice.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use prometheus_client::collector::Collector;
pub use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
pub use prometheus_client::registry::Unit;

/// How a daemon writes its statistics into a scrape's answer.
pub type Encode<T> = fn(&mut DescriptorEncoder, &T) -> std::fmt::Result;

/// The longest request read before the answer (a scrape's is about 300 bytes).
const MAX_REQUEST: usize = 8 << 10;
/// How long one connection may take to send its request or read the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a daemon hands the exporter a new copy: Prometheus's shortest
/// usual scrape interval.
pub const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// What the daemon published last, and which copy a scrape served last.
#[derive(Debug)]
struct Shared<T> {
    latest: Mutex<Option<(u64, T)>>,
    /// Copies published (the number of the latest).
    published: AtomicU64,
    /// The number of the copy the last answered scrape carried.
    served: AtomicU64,
    /// When the last periodic copy was offered (ns after `created`; MAX: never).
    offered_ns: AtomicU64,
    created: Instant,
}

impl<T> Default for Shared<T> {
    fn default() -> Self {
        Shared {
            latest: Mutex::new(None),
            published: AtomicU64::new(0),
            served: AtomicU64::new(0),
            offered_ns: AtomicU64::new(u64::MAX),
            created: Instant::now(),
        }
    }
}

/// The daemon's handle: cheap to clone, never blocks.
#[derive(Debug)]
pub struct Publisher<T>(Arc<Shared<T>>);

impl<T> Clone for Publisher<T> {
    fn clone(&self) -> Self {
        Publisher(self.0.clone())
    }
}

impl<T: Clone> Publisher<T> {
    /// Whether a periodic copy is due ([`PUBLISH_EVERY`] after the last one
    /// offered, or none yet): a daemon builds the copy only then.
    pub fn due(&self) -> bool {
        let last = self.0.offered_ns.load(Ordering::Relaxed);
        last == u64::MAX
            || self.0.created.elapsed().as_nanos() as u64
                >= last.saturating_add(PUBLISH_EVERY.as_nanos() as u64)
    }

    /// A periodic copy: skipped if a scrape is reading the last one right now.
    pub fn publish(&self, m: &T) {
        let now = self.0.created.elapsed().as_nanos() as u64;
        self.0.offered_ns.store(now, Ordering::Relaxed);
        if let Ok(mut slot) = self.0.latest.try_lock() {
            let n = self.0.published.fetch_add(1, Ordering::Relaxed) + 1;
            *slot = Some((n, m.clone()));
        }
    }

    /// The final account: always published (waits out a scrape's clone).
    pub fn publish_final(&self, m: &T) {
        let mut slot = self.0.latest.lock().unwrap_or_else(|e| e.into_inner());
        let n = self.0.published.fetch_add(1, Ordering::Relaxed) + 1;
        *slot = Some((n, m.clone()));
    }

    /// `--metrics-final-wait`: after the final account, waits at most
    /// `limit` until a scrape has read it, and says so on stderr (as
    /// `who`) if none did.
    pub fn wait_final(&self, limit: Duration, who: &str) {
        if !limit.is_zero() && !self.wait_scraped(limit) {
            eprintln!(
                "{who}: metrics: no scrape read the final account within --metrics-final-wait {}s",
                limit.as_secs_f64()
            );
        }
    }

    /// Waits, at most `limit`, until a scrape has carried the last copy
    /// published, so that the monitoring sees the final account of a run
    /// that ends (`--metrics-final-wait`). Whether it did.
    pub fn wait_scraped(&self, limit: Duration) -> bool {
        let last = self.0.published.load(Ordering::Relaxed);
        let t0 = Instant::now();
        while self.0.served.load(Ordering::Relaxed) < last {
            if t0.elapsed() >= limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }
}

/// `--metrics-final-wait SECS`, checked: a number of seconds ≥ 0 (and
/// one a duration can hold).
pub fn final_wait(secs: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(secs)
        .ok()
        .context("--metrics-final-wait must be a number of seconds ≥ 0")
}

/// The listening socket, bound before any output is created: a bad or
/// taken address is refused while nothing has been written yet.
#[derive(Debug)]
pub struct Endpoint {
    listener: TcpListener,
    addr: SocketAddr,
}

impl Endpoint {
    pub fn bind(addr: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind(addr)
            .with_context(|| format!("--metrics {addr}: cannot listen there"))?;
        Ok(Endpoint { listener, addr })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Starts answering scrapes on a thread of its own: `process` names the
    /// daemon in the build metric (`custos_<process>_build`), `encode`
    /// writes a copy.
    pub fn serve<T: Clone + Send + std::fmt::Debug + 'static>(
        self,
        process: &'static str,
        encode: Encode<T>,
    ) -> Result<Publisher<T>> {
        let shared = Arc::new(Shared::default());
        let registry = registry(shared.clone(), process, encode);
        let listener = self.listener;
        std::thread::Builder::new()
            .name("custos-metrics".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    match conn {
                        // A failed answer concerns its client only.
                        Ok(conn) => drop(answer(conn, &registry)),
                        // Out of descriptors, say: no busy loop meanwhile.
                        Err(_) => std::thread::sleep(Duration::from_millis(50)),
                    }
                }
            })
            .context("starting the metrics server")?;
        Ok(Publisher(shared))
    }
}

/// One request, one answer, then the connection is closed.
fn answer(mut conn: TcpStream, registry: &Registry) -> std::io::Result<()> {
    conn.set_read_timeout(Some(IO_TIMEOUT))?;
    conn.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut req = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
        if req.len() >= MAX_REQUEST {
            return respond(
                &mut conn,
                "431 Request Header Fields Too Large",
                "text/plain",
                b"",
            );
        }
        match conn.read(&mut buf)? {
            0 => return Ok(()),
            n => req.extend_from_slice(&buf[..n]),
        }
    }
    let line = req.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, target) = (parts.next(), parts.next());
    if method != Some(b"GET".as_slice()) {
        return respond(
            &mut conn,
            "405 Method Not Allowed",
            "text/plain",
            b"GET only\n",
        );
    }
    let path = target
        .unwrap_or_default()
        .split(|&b| b == b'?')
        .next()
        .unwrap_or_default();
    if path != b"/metrics" {
        return respond(&mut conn, "404 Not Found", "text/plain", b"see /metrics\n");
    }
    let mut body = String::with_capacity(8 << 10);
    if prometheus_client::encoding::text::encode(&mut body, registry).is_err() {
        return respond(&mut conn, "500 Internal Server Error", "text/plain", b"");
    }
    respond(
        &mut conn,
        "200 OK",
        "application/openmetrics-text; version=1.0.0; charset=utf-8",
        body.as_bytes(),
    )
}

fn respond(conn: &mut TcpStream, status: &str, ty: &str, body: &[u8]) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ty}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes())?;
    conn.write_all(body)?;
    conn.flush()
}

/// Encodes the latest copy at each scrape.
struct Snapshot<T> {
    shared: Arc<Shared<T>>,
    process: &'static str,
    encode: Encode<T>,
}

impl<T: std::fmt::Debug> std::fmt::Debug for Snapshot<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("process", &self.process)
            .finish()
    }
}

/// One counter (`NAME_total`).
pub fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    let c = ConstCounter::new(v);
    c.encode(e.encode_descriptor(name, help, None, c.metric_type())?)
}

/// A counter of a command's summary `T`: its name (the exposition adds
/// `_total`), its HELP, and its figure of the summary. A table of them
/// names and describes each figure once (`custos ingest`, `custos fleet
/// ingest`).
pub type Counter<T> = (&'static str, &'static str, fn(&T) -> u64);

/// Every counter of `table`, from one copy of the summary.
pub fn counters<T>(e: &mut DescriptorEncoder, table: &[Counter<T>], s: &T) -> std::fmt::Result {
    for (name, help, value) in table {
        counter(e, name, help, value(s))?;
    }
    Ok(())
}

/// A counter family: one descriptor, then a series per label set.
pub fn counter_family<S: EncodeLabelSet>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (S, u64)>,
) -> std::fmt::Result {
    let mut fam = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in series {
        ConstCounter::new(v).encode(fam.encode_family(&labels)?)?;
    }
    Ok(())
}

/// One gauge.
pub fn gauge<N>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    v: N,
) -> std::fmt::Result
where
    ConstGauge<N>: EncodeMetric,
{
    let g = ConstGauge::new(v);
    g.encode(e.encode_descriptor(name, help, unit, g.metric_type())?)
}

impl<T: Clone + Send + std::fmt::Debug + 'static> Collector for Snapshot<T> {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        // The process's own figures first: they need no copy.
        if let Some((cpu, rss)) = process_usage() {
            let c = ConstCounter::new(cpu);
            c.encode(e.encode_descriptor(
                "process_cpu",
                "User and system CPU time the process spent.",
                Some(&Unit::Seconds),
                c.metric_type(),
            )?)?;
            gauge(
                &mut e,
                "process_resident_memory",
                "The process's resident memory.",
                Some(&Unit::Bytes),
                rss as i64,
            )?;
        }
        let info =
            prometheus_client::metrics::info::Info::new([("version", env!("CARGO_PKG_VERSION"))]);
        info.encode(e.encode_descriptor(
            &format!("custos_{}_build", self.process),
            "The daemon's version.",
            None,
            info.metric_type(),
        )?)?;
        let copy = self
            .shared
            .latest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        // Before the first copy (the programs are still loading) there is
        // nothing to say yet: no zeros that would read as a reset.
        let Some((n, m)) = copy else {
            return Ok(());
        };
        (self.encode)(&mut e, &m)?;
        self.shared.served.fetch_max(n, Ordering::Relaxed);
        Ok(())
    }
}

/// What a scrape of a daemon serving `encode` reads once it published `m`,
/// without a socket: for the tests that hold the exposition to its
/// documentation ([`undocumented`]).
pub fn exposition<T: Clone + Send + std::fmt::Debug + 'static>(
    process: &'static str,
    encode: Encode<T>,
    m: &T,
) -> String {
    let shared = Arc::new(Shared::default());
    *shared.latest.lock().unwrap_or_else(|p| p.into_inner()) = Some((1, m.clone()));
    let mut body = String::new();
    prometheus_client::encoding::text::encode(&mut body, &registry(shared, process, encode))
        .expect("encoding into a String");
    body
}

/// What a daemon answers scrapes from: its copies, encoded at each scrape.
fn registry<T: Clone + Send + std::fmt::Debug + 'static>(
    shared: Arc<Shared<T>>,
    process: &'static str,
    encode: Encode<T>,
) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Snapshot {
        shared,
        process,
        encode,
    }));
    registry
}

/// The series an exposition has samples of (as a scrape names them:
/// `x_total`, `x_info`), sorted, each once.
pub fn series(exposition: &str) -> Vec<&str> {
    let mut names: Vec<&str> = exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// The [`series`] of an exposition that `doc` does not name in backquotes.
pub fn undocumented(exposition: &str, doc: &str) -> Vec<String> {
    series(exposition)
        .into_iter()
        .filter(|n| !doc.contains(&format!("`{n}`")) && !doc.contains(&format!("`{n}{{")))
        .map(str::to_string)
        .collect()
}

/// For a daemon's tests: docs/operations.md names every series a scrape of
/// `encode` reads (after publishing `m`), and the scrape has `expected`
/// (so that an empty exposition cannot pass).
pub fn assert_documented<T: Clone + Send + std::fmt::Debug + 'static>(
    process: &'static str,
    encode: Encode<T>,
    m: &T,
    expected: &str,
) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/operations.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let text = exposition(process, encode, m);
    assert!(text.contains(expected), "{expected} not served: {text}");
    let missing = undocumented(&text, &doc);
    assert!(missing.is_empty(), "not in docs/operations.md: {missing:?}");
}

/// The process's CPU time (seconds) and resident memory (bytes), from /proc.
fn process_usage() -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which may hold spaces: utime is the
    // 14th field of the line, the 12th after the name.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let (utime, stime): (u64, u64) = (f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?);
    // SAFETY: sysconf reads constants.
    let (tick, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    if tick <= 0 || page <= 0 {
        return None;
    }
    Some(((utime + stime) as f64 / tick as f64, pages * page as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every series of an exposition is found in a document that names it,
    /// with or without its labels; the others are listed once.
    #[test]
    fn undocumented_lists_each_series_a_document_does_not_name() {
        let text = "# HELP a_x X.\n# TYPE a_x counter\na_x_total 3\nb_y{k=\"1\"} 1\nb_y{k=\"2\"} 2\nc_info{version=\"1\"} 1\n# EOF\n";
        assert_eq!(
            undocumented(text, "`a_x_total` and `b_y{k}`"),
            vec!["c_info"]
        );
        assert!(undocumented(text, "`a_x_total`, `b_y`, `c_info`").is_empty());
    }

    /// The first copy is due at once, the next one PUBLISH_EVERY after it
    /// was offered, whether or not a scrape was reading then.
    #[test]
    fn a_copy_is_due_at_first_and_then_once_a_period() {
        // A daemon that started ten seconds ago.
        let p: Publisher<u32> = Publisher(Arc::new(Shared {
            created: Instant::now() - Duration::from_secs(10),
            ..Shared::default()
        }));
        assert!(p.due());
        p.publish(&1);
        assert!(!p.due());
        // Offered while a scrape holds the slot: skipped, still paced.
        let held = p.0.latest.lock().unwrap();
        p.0.offered_ns.store(u64::MAX, Ordering::Relaxed);
        p.publish(&2);
        assert!(!p.due());
        drop(held);
        let back = PUBLISH_EVERY.as_nanos() as u64 + 1;
        let now = p.0.created.elapsed().as_nanos() as u64;
        p.0.offered_ns.store(now - back, Ordering::Relaxed);
        assert!(p.due());
        assert_eq!(p.0.published.load(Ordering::Relaxed), 1);
    }
}
