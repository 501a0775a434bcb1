//! Real servers on loopback for the fleet's tests and bench: a single-node
//! Kafka broker (KRaft: its own controller, no ZooKeeper) and a ClickHouse
//! server, each on free ports under a temporary directory, stopped by PID
//! when dropped; either can be killed and restarted on its data and port
//! (the outage tests). Not mocks: the code under test talks to the real thing.
//! A server also dies with the thread that started it (so a killed test
//! leaves none behind): start and use it on one thread.
//!
//! The broker's jars come from `scripts/deps.sh` (`.tools/kafka/libs`, or
//! `$CUSTOS_KAFKA_LIBS`); ClickHouse is Debian's `clickhouse-server`.

use anyhow::{bail, Context, Result};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, Producer};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to answer after start (the broker takes ~2–6 s).
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A port nobody listens on now (the kernel's pick; free until someone binds it).
fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Runs `cmd` with its output in `log`, killed with us: the child gets
/// SIGKILL when the thread that started it ends, so a test that panics
/// past its `Drop` leaves no server behind.
fn spawn(mut cmd: Command, log: &Path) -> Result<Child> {
    let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    // SAFETY: prctl is async-signal-safe and touches no memory of ours.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn()
        .with_context(|| format!("starting {:?}", cmd.get_program()))
}

fn stop(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// The tail of a server's log, for an error message.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// Where `scripts/deps.sh` put the broker's jars.
fn kafka_libs() -> Result<PathBuf> {
    let dir = match std::env::var_os("CUSTOS_KAFKA_LIBS") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.tools/kafka/libs"),
    };
    let has_broker = std::fs::read_dir(&dir).is_ok_and(|d| {
        d.flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("kafka_2.13-"))
    });
    if !has_broker {
        bail!(
            "no Kafka broker jars in {}: run scripts/deps.sh (or set CUSTOS_KAFKA_LIBS)",
            dir.display()
        );
    }
    Ok(dir)
}

/// A single-node Kafka broker, on loopback unless started with [`KafkaBroker::start_on`].
pub struct KafkaBroker {
    dir: tempfile::TempDir,
    /// The address clients reach it at.
    ip: String,
    port: u16,
    libs: PathBuf,
    child: Option<Child>,
    /// Log file of the current run (each restart appends a new one).
    runs: u32,
}

impl KafkaBroker {
    /// Formats a fresh data directory and starts the broker; returns once it
    /// answers metadata requests. `partitions`: of topics it creates itself.
    pub fn start(partitions: u32) -> Result<KafkaBroker> {
        Self::start_on(partitions, "127.0.0.1")
    }

    /// The same, listening for clients on `ip` (one of this machine's
    /// addresses), e.g. for a VM's collector on a host-only network.
    pub fn start_on(partitions: u32, ip: &str) -> Result<KafkaBroker> {
        let libs = kafka_libs()?;
        let dir = tempfile::Builder::new().prefix("custos-kafka-").tempdir()?;
        let (port, controller) = (free_port()?, free_port()?);
        let config = dir.path().join("server.properties");
        std::fs::write(
            &config,
            format!(
                "process.roles=broker,controller\n\
                 node.id=1\n\
                 controller.quorum.voters=1@127.0.0.1:{controller}\n\
                 listeners=PLAINTEXT://{ip}:{port},CONTROLLER://127.0.0.1:{controller}\n\
                 advertised.listeners=PLAINTEXT://{ip}:{port}\n\
                 controller.listener.names=CONTROLLER\n\
                 listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n\
                 log.dirs={}\n\
                 num.partitions={partitions}\n\
                 offsets.topic.replication.factor=1\n\
                 offsets.topic.num.partitions=4\n\
                 transaction.state.log.replication.factor=1\n\
                 transaction.state.log.min.isr=1\n\
                 group.initial.rebalance.delay.ms=0\n",
                dir.path().join("data").display()
            ),
        )?;
        // A fixed cluster id: each broker has a directory of its own anyway.
        let mut format = Command::new("java");
        format
            .arg("-cp")
            .arg(libs.join("*"))
            .args([
                "kafka.tools.StorageTool",
                "format",
                "-t",
                "MkU3OEVBNTcwNTJENDM2Qg",
                "-c",
            ])
            .arg(&config);
        let log = dir.path().join("format.log");
        let status = spawn(format, &log)?.wait()?;
        if !status.success() {
            bail!(
                "formatting the Kafka broker's storage failed ({status}):\n{}",
                log_tail(&log)
            );
        }
        let mut broker = KafkaBroker {
            dir,
            ip: ip.to_string(),
            port,
            libs,
            child: None,
            runs: 0,
        };
        broker.restart()?;
        Ok(broker)
    }

    /// `host:port` for `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }

    /// The broker's PID while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the broker (SIGKILL: an outage, not a shutdown). Its data stays.
    pub fn kill(&mut self) {
        stop(&mut self.child);
    }

    /// Starts the broker again (or the first time) on the same data and port;
    /// returns once it answers.
    pub fn restart(&mut self) -> Result<()> {
        stop(&mut self.child);
        self.runs += 1;
        let log = self.dir.path().join(format!("broker-{}.log", self.runs));
        let mut cmd = Command::new("java");
        cmd.args(["-Xms128m", "-Xmx512m", "-cp"])
            .arg(self.libs.join("*"))
            .arg("kafka.Kafka")
            .arg(self.dir.path().join("server.properties"));
        self.child = Some(spawn(cmd, &log)?);
        let probe: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap())
            .set("log_level", "0")
            .create()?;
        let start = Instant::now();
        loop {
            if let Ok(md) = probe
                .client()
                .fetch_metadata(None, Duration::from_millis(500))
            {
                if !md.brokers().is_empty() {
                    return Ok(());
                }
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                bail!("the Kafka broker exited ({status}):\n{}", log_tail(&log));
            }
            if start.elapsed() > READY_TIMEOUT {
                bail!(
                    "the Kafka broker did not answer within {READY_TIMEOUT:?}:\n{}",
                    log_tail(&log)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Creates `topic` with `partitions` partitions (replication 1).
    pub fn create_topic(&self, topic: &str, partitions: i32) -> Result<()> {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap())
            .create()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()?;
        let results = rt.block_on(admin.create_topics(
            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        ))?;
        for r in results {
            r.map_err(|(t, e)| anyhow::anyhow!("creating topic {t}: {e}"))?;
        }
        Ok(())
    }
}

impl Drop for KafkaBroker {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// A ClickHouse server on loopback.
pub struct ClickHouseServer {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
}

impl ClickHouseServer {
    /// Starts a server with a data directory of its own; returns once it answers.
    pub fn start() -> Result<ClickHouseServer> {
        ClickHouseServer::start_with("")
    }

    /// Like [`start`](Self::start), with `extra` XML in the server's config
    /// (e.g. a `<compression>` section: 18.16 has no per-column codecs).
    pub fn start_with(extra: &str) -> Result<ClickHouseServer> {
        let dir = tempfile::Builder::new()
            .prefix("custos-clickhouse-")
            .tempdir()?;
        let (port, tcp_port) = (free_port()?, free_port()?);
        let d = dir.path().display();
        // Debian's users.xml: the `default` user, no password, loopback only here.
        std::fs::copy("/etc/clickhouse-server/users.xml", dir.path().join("users.xml"))
            .context("reading /etc/clickhouse-server/users.xml: is clickhouse-server installed (scripts/deps.sh)?")?;
        std::fs::write(
            dir.path().join("config.xml"),
            format!(
                "<yandex>\n\
                 <logger><level>warning</level><log>{d}/server.log</log><errorlog>{d}/server.err.log</errorlog><size>10M</size><count>1</count></logger>\n\
                 <http_port>{port}</http_port>\n\
                 <tcp_port>{tcp_port}</tcp_port>\n\
                 <listen_host>127.0.0.1</listen_host>\n\
                 <path>{d}/data/</path>\n\
                 <tmp_path>{d}/tmp/</tmp_path>\n\
                 <user_files_path>{d}/user_files/</user_files_path>\n\
                 <format_schema_path>{d}/format_schemas/</format_schema_path>\n\
                 <users_config>users.xml</users_config>\n\
                 <default_profile>default</default_profile>\n\
                 <default_database>default</default_database>\n\
                 <mark_cache_size>268435456</mark_cache_size>\n\
                 <uncompressed_cache_size>268435456</uncompressed_cache_size>\n\
                 <mlock_executable>false</mlock_executable>\n\
                 {extra}\n\
                 </yandex>\n"
            ),
        )?;
        let mut server = ClickHouseServer {
            dir,
            port,
            child: None,
        };
        server.restart()?;
        Ok(server)
    }

    /// Kills the server (SIGKILL: a crash, not a shutdown). Its data stays.
    pub fn kill(&mut self) {
        stop(&mut self.child);
    }

    /// Starts the server again (or the first time) on the same data and
    /// port; returns once it answers.
    pub fn restart(&mut self) -> Result<()> {
        stop(&mut self.child);
        let log = self.dir.path().join("stdout.log");
        let mut cmd = Command::new("clickhouse-server");
        cmd.arg(format!(
            "--config-file={}/config.xml",
            self.dir.path().display()
        ));
        self.child = Some(spawn(cmd, &log)?);
        let client = clickhouse::Client::default()
            .with_url(self.url())
            .with_validation(false);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let start = Instant::now();
        while rt.block_on(client.query("SELECT 1").execute()).is_err() {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                bail!(
                    "clickhouse-server exited ({status}):\n{}\n{}",
                    log_tail(&log),
                    log_tail(&self.dir.path().join("server.err.log"))
                );
            }
            if start.elapsed() > READY_TIMEOUT {
                bail!(
                    "clickhouse-server did not answer within {READY_TIMEOUT:?}:\n{}",
                    log_tail(&log)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// The HTTP interface's URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Runs one statement that returns nothing (DDL, inserts by hand).
    pub fn execute(&self, sql: &str) -> Result<()> {
        let client = clickhouse::Client::default()
            .with_url(self.url())
            .with_validation(false);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(client.query(sql).execute())
            .with_context(|| format!("ClickHouse: {sql}"))
    }

    /// Runs a query whose rows are one unsigned number each (for checks).
    pub fn query_u64(&self, sql: &str) -> Result<Vec<u64>> {
        let client = clickhouse::Client::default()
            .with_url(self.url())
            .with_validation(false);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(client.query(sql).fetch_all::<u64>())
            .with_context(|| format!("ClickHouse: {sql}"))
    }

    /// The server's data directory (for measuring what the tables take on disk).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }
}

impl Drop for ClickHouseServer {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

const T0: u64 = 1_800_000_000_000_000_000;
const MS: u64 = 1_000_000;

/// An event line as the collector writes it (the fields the store reads).
fn ev(id: u64, ms: u64, pid: u32, comm: &str, syscall: &str, ret: i64, extra: &str) -> String {
    format!(
        r#"{{"type":"event","id":{id},"cpu":0,"seq":{id},"time_ns":{},"pid":{pid},"tid":{pid},"ppid":1,"uid":0,"euid":0,"comm":"{comm}","syscall":"{syscall}","ret":{ret}{extra}}}"#,
        T0 + ms * MS
    )
}

/// Three hosts' streams for the tests and the bench, by host name: host a
/// (10.0.0.1) reads /etc/secret and sends it to b's port 7000, and sends
/// something to a server outside the fleet; host c (10.0.0.3) connects to
/// the same port 2 ms later and sends /etc/other. Host b (10.0.0.2) accepts
/// both, reads each and writes /srv/received and /srv/other. These carry
/// both ends' own addresses (`laddr`), so each connection is joined exactly
/// though both reached one port within the time window. A third connection,
/// from a to b's port 7001, is as a collector without `laddr` wrote it:
/// joined by port and time.
pub fn fleet_streams() -> [(&'static str, String); 3] {
    // (ms, pid, comm, syscall, ret, fields): numbered in time order, as a CPU numbers its events.
    let stream = |boot: &str, evs: &[(u64, u32, &str, &str, i64, &str)]| -> Vec<String> {
        let mut lines = vec![format!(r#"{{"type":"boot","boot_id":"{boot}"}}"#)];
        lines.extend(
            evs.iter()
                .enumerate()
                .map(|(i, &(ms, pid, comm, sc, ret, extra))| {
                    ev(i as u64 + 1, ms, pid, comm, sc, ret, extra)
                }),
        );
        lines
    };
    let a = stream(
        "boot-a",
        &[
            (
                1,
                100,
                "sender",
                "execve",
                0,
                r#","path":"/usr/bin/sender","argv":["sender"]"#,
            ),
            (
                2,
                100,
                "sender",
                "openat",
                3,
                r#","path":"/etc/secret","fd":3"#,
            ),
            (
                3,
                100,
                "sender",
                "read",
                100,
                r#","args":{"fd":3},"fd":3,"path":"/etc/secret""#,
            ),
            (
                4,
                100,
                "sender",
                "connect",
                -115,
                r#","args":{"fd":4},"addr":"10.0.0.2:7000","laddr":"10.0.0.1:45678""#,
            ),
            (
                5,
                100,
                "sender",
                "write",
                100,
                r#","args":{"fd":4},"fd":4,"path":"socket:[77]""#,
            ),
            (
                6,
                100,
                "sender",
                "connect",
                0,
                r#","args":{"fd":5},"addr":"93.184.216.34:443","laddr":"10.0.0.1:50000""#,
            ),
            (
                7,
                100,
                "sender",
                "write",
                100,
                r#","args":{"fd":5},"fd":5,"path":"socket:[78]""#,
            ),
            (
                9,
                102,
                "legacy",
                "read",
                10,
                r#","args":{"fd":3},"fd":3,"path":"/etc/legacy""#,
            ),
            (
                10,
                102,
                "legacy",
                "connect",
                0,
                r#","args":{"fd":4},"addr":"10.0.0.2:7001""#,
            ),
            (
                11,
                102,
                "legacy",
                "write",
                10,
                r#","args":{"fd":4},"fd":4,"path":"socket:[80]""#,
            ),
        ],
    );
    let c = stream(
        "boot-c",
        &[
            (
                2,
                300,
                "other",
                "execve",
                0,
                r#","path":"/usr/bin/other","argv":["other"]"#,
            ),
            (
                3,
                300,
                "other",
                "read",
                50,
                r#","args":{"fd":3},"fd":3,"path":"/etc/other""#,
            ),
            (
                6,
                300,
                "other",
                "connect",
                0,
                r#","args":{"fd":4},"addr":"10.0.0.2:7000","laddr":"10.0.0.3:45679""#,
            ),
            (
                7,
                300,
                "other",
                "write",
                50,
                r#","args":{"fd":4},"fd":4,"path":"socket:[79]""#,
            ),
        ],
    );
    let mut b = stream(
        "boot-b",
        &[
            (
                0,
                200,
                "receiver",
                "execve",
                0,
                r#","path":"/usr/bin/receiver","argv":["receiver"]"#,
            ),
            (
                0,
                200,
                "receiver",
                "bind",
                0,
                r#","args":{"fd":3},"addr":"0.0.0.0:7000""#,
            ),
            (
                1,
                202,
                "old",
                "bind",
                0,
                r#","args":{"fd":3},"addr":"0.0.0.0:7001""#,
            ),
            // The second client's connection is accepted first.
            (
                7,
                200,
                "receiver",
                "accept4",
                6,
                r#","args":{"fd":3},"fd":6,"addr":"10.0.0.3:45679","laddr":"10.0.0.2:7000""#,
            ),
            (
                8,
                200,
                "receiver",
                "read",
                50,
                r#","args":{"fd":6},"fd":6,"path":"socket:[92]""#,
            ),
            (
                8,
                200,
                "receiver",
                "openat",
                7,
                r#","path":"/srv/other","fd":7"#,
            ),
            (
                9,
                200,
                "receiver",
                "write",
                50,
                r#","args":{"fd":7},"fd":7,"path":"/srv/other""#,
            ),
            (
                9,
                201,
                "receiver2",
                "accept4",
                4,
                r#","args":{"fd":3},"fd":4,"addr":"10.0.0.1:45678","laddr":"10.0.0.2:7000""#,
            ),
            (
                10,
                201,
                "receiver2",
                "read",
                100,
                r#","args":{"fd":4},"fd":4,"path":"socket:[91]""#,
            ),
            (
                11,
                201,
                "receiver2",
                "openat",
                5,
                r#","path":"/srv/received","fd":5"#,
            ),
            (
                12,
                201,
                "receiver2",
                "write",
                100,
                r#","args":{"fd":5},"fd":5,"path":"/srv/received""#,
            ),
            // A collector without `laddr` wrote this one.
            (
                12,
                202,
                "old",
                "accept",
                4,
                r#","args":{"fd":3},"fd":4,"addr":"10.0.0.1:40000""#,
            ),
            (
                13,
                202,
                "old",
                "read",
                10,
                r#","args":{"fd":4},"fd":4,"path":"socket:[93]""#,
            ),
            (
                14,
                202,
                "old",
                "openat",
                5,
                r#","path":"/srv/legacy","fd":5"#,
            ),
            (
                15,
                202,
                "old",
                "write",
                10,
                r#","args":{"fd":5},"fd":5,"path":"/srv/legacy""#,
            ),
        ],
    );
    b.push(format!(r#"{{"type":"loss","boot_id":"boot-b","category":"ring","cpu":1,"count":3,"start_ns":{},"end_ns":{}}}"#, T0 + 20 * MS, T0 + 21 * MS));
    let text = |lines: Vec<String>| lines.join("\n") + "\n";
    [
        ("host-a", text(a)),
        ("host-b", text(b)),
        ("host-c", text(c)),
    ]
}
