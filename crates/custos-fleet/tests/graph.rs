//! The fleet's graph on real servers: three hosts' streams through Kafka,
//! `fleet ingest --graph-dir` builds each host's graph with the store's
//! builder, and the store's queries are answered from ClickHouse, across
//! the hosts where a connection joins them.

use custos_fleet::ingest::{IngestOptions, IngestSummary, Ingester};
use custos_fleet::query::Fleet;
use custos_fleet::servers::{ClickHouseServer, KafkaBroker};
use custos_fleet::sink::{KafkaOptions, KafkaTarget};
use custos_store::query::{Answer, Direction, Window};
use custos_store::sink::LiveSink;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

fn send(broker: &KafkaBroker, topic: &str, host: &str, lines: &str) {
    let (sink, mut w) = LiveSink::spawn(
        "custos-kafka-sink",
        KafkaTarget::connect(KafkaOptions::new(&broker.bootstrap(), topic, host)).unwrap(),
        1 << 20,
    )
    .unwrap();
    w.write_all(lines.as_bytes()).unwrap();
    drop(w);
    assert_eq!(
        sink.finish().unwrap().delivered,
        lines.lines().count() as u64
    );
}

fn ingest(
    broker: &KafkaBroker,
    ch: &ClickHouseServer,
    topic: &str,
    group: &str,
    graph_dir: &Path,
) -> IngestSummary {
    let mut opts = IngestOptions::new(&broker.bootstrap(), topic, &ch.url());
    opts.group = group.into();
    opts.batch_wait = Duration::from_millis(300);
    opts.stop_when_idle = Some(Duration::from_secs(2));
    opts.graph_dir = Some(graph_dir.to_path_buf());
    Ingester::connect(opts)
        .unwrap()
        .run(&AtomicBool::new(false))
        .unwrap()
}

fn names(a: &Answer) -> Vec<String> {
    a.nodes.iter().map(|n| n.name.clone()).collect()
}

#[test]
fn fleet_queries_cross_from_a_file_on_one_host_to_a_file_on_another() {
    let started = Instant::now();
    let topic = "custos-graph";
    let ch = ClickHouseServer::start().unwrap();
    let broker = KafkaBroker::start(2).unwrap();
    broker.create_topic(topic, 2).unwrap();
    for (host, lines) in custos_fleet::servers::fleet_streams() {
        send(&broker, topic, host, &lines);
    }
    // The events table as the first fleet version made it, before `laddr`:
    // ingest adds the column rather than refusing the table.
    let old = custos_fleet::schema::create_statements("custos");
    for sql in &old[..2] {
        ch.execute(&sql.replace(" laddr String,", "")).unwrap();
    }
    assert_eq!(ch.query_u64("SELECT count() FROM system.columns WHERE database = 'custos' AND table = 'events' AND name = 'laddr'").unwrap(), [0]);
    let dir = tempfile::tempdir().unwrap();
    let first = ingest(&broker, &ch, topic, "g1", dir.path());
    assert_eq!(first.events, 29, "{first:?}");
    assert_eq!(
        ch.query_u64("SELECT count() FROM custos.events WHERE laddr != ''")
            .unwrap(),
        [5],
        "every laddr stored"
    );
    assert!(first.nodes > 0 && first.edges > 0, "{first:?}");

    let mut fleet = Fleet::connect(&ch.url(), "custos").unwrap();
    // The secret reaches b's process and the file it wrote, over the connection.
    let d = fleet
        .ancestry(
            "host-a:/etc/secret",
            Direction::Descendants,
            None,
            Window::default(),
        )
        .unwrap();
    let got = names(&d);
    for want in [
        "host-a:/etc/secret",
        "host-a:/usr/bin/sender",
        "host-a:10.0.0.2:7000",
        "host-b:10.0.0.1:45678",
        "host-b:[receiver2]",
        "host-b:/srv/received",
    ] {
        assert!(
            got.iter().any(|n| n == want),
            "{want} not among the descendants {got:?}"
        );
    }
    assert!(
        d.notes[0].starts_with("crossed hosts at sockets"),
        "{:?}",
        d.notes
    );
    // Two connections (from a and c) reached b's port 7000 within 2 ms: each end's own
    // address joins the secret's to its own accept only.
    assert!(
        !got.iter()
            .any(|n| n == "host-b:/srv/other" || n == "host-b:10.0.0.3:45679"),
        "the other client's connection is not the secret's: {got:?}"
    );
    assert!(
        !d.notes
            .iter()
            .any(|n| n.contains("possible other ends") || n.contains(": joined by port and time")),
        "{:?}",
        d.notes
    );
    let other = fleet
        .ancestry(
            "host-c:/etc/other",
            Direction::Descendants,
            None,
            Window::default(),
        )
        .unwrap();
    let got_other = names(&other);
    assert!(
        got_other.iter().any(|n| n == "host-b:/srv/other")
            && !got_other.iter().any(|n| n == "host-b:/srv/received"),
        "{got_other:?}"
    );
    // A stream without the client's own address is joined by port and time, and says so.
    let legacy = fleet
        .ancestry(
            "host-b:/srv/legacy",
            Direction::Ancestors,
            None,
            Window::default(),
        )
        .unwrap();
    assert!(
        names(&legacy).iter().any(|n| n == "host-a:/etc/legacy"),
        "{:?}",
        names(&legacy)
    );
    assert!(
        !names(&legacy)
            .iter()
            .any(|n| n == "host-a:/etc/secret" || n == "host-c:/etc/other"),
        "{:?}",
        names(&legacy)
    );
    assert!(
        legacy
            .notes
            .iter()
            .any(|n| n.contains("host-b's accept from 10.0.0.1:40000: joined by port and time")),
        "{:?}",
        legacy.notes
    );
    // The connection to a server outside the fleet is said to end there.
    assert!(d.notes.iter().any(|n| n.contains("host-a's connect to 93.184.216.34:443: no other end in the fleet")), "{:?}", d.notes);
    // b lost events after the write: a descendant may be missing, and the answer says whose.
    assert!(
        !d.complete
            && d.losses
                .iter()
                .any(|l| l.host.as_deref() == Some("host-b") && l.count == 3),
        "{:?}",
        d.losses
    );
    let text = custos_store::render::text(&d);
    assert!(
        text.contains("of host host-b") && text.contains("NOTE: crossed hosts"),
        "{text}"
    );

    // And back: the received file's ancestors reach the secret on a.
    let up = fleet
        .ancestry(
            "host-b:/srv/received",
            Direction::Ancestors,
            None,
            Window::default(),
        )
        .unwrap();
    assert!(
        names(&up).iter().any(|n| n == "host-a:/etc/secret"),
        "{:?}",
        names(&up)
    );
    let p = fleet.path("host-b:/srv/received", "/etc/secret").unwrap();
    assert_eq!(
        p.path.as_deref(),
        Some("host-b:/srv/received depends on /etc/secret")
    );
    assert!(p.edges.len() >= 5, "{:?}", names(&p));

    let who = fleet.who_touched("/etc/secret", Window::default()).unwrap();
    assert_eq!(
        who.rows.iter().map(|r| r.action).collect::<Vec<_>>(),
        ["read"]
    );
    let touched = fleet
        .touched_by("host-b:pid:200", Window::default())
        .unwrap();
    let objects: Vec<String> = touched
        .rows
        .iter()
        .map(|r| format!("{} {}", r.action, touched.node(r.object).unwrap().name))
        .collect();
    assert_eq!(
        objects,
        [
            "read host-b:/usr/bin/receiver",
            "read host-b:10.0.0.3:45679",
            "wrote host-b:/srv/other"
        ]
    );

    // Bad names say what to give.
    let e = fleet.resolve("n3", false).unwrap_err().to_string();
    assert!(e.contains("give HOST:n3") && e.contains("host-a"), "{e}");
    let e = fleet.resolve("/no/such", false).unwrap_err().to_string();
    assert!(e.contains("nothing in the fleet's graph matches"), "{e}");
    assert!(Fleet::connect(&ch.url(), "nosuchdb")
        .err()
        .unwrap()
        .to_string()
        .contains("--graph-dir"));

    // A second group re-reads the topic: the graph makes nothing twice
    // (opening it again re-sends the edges of its newest time, which the key folds).
    let count = "SELECT (SELECT count() FROM custos.nodes FINAL) * 1000 + (SELECT count() FROM custos.edges FINAL)";
    let before = ch.query_u64(count).unwrap();
    let again = ingest(&broker, &ch, topic, "g2", dir.path());
    assert_eq!((again.events, again.nodes), (0, 0), "{again:?}");
    assert_eq!(ch.query_u64(count).unwrap(), before);
    eprintln!("took {:?}", started.elapsed());
}
