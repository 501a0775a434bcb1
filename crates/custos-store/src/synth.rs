//! Deterministic synthetic provenance in the collector's JSON Lines format,
//! shaped like a large build (LPM's kernel-compile yardstick): projects whose
//! `make` forks gcc → cc1 → as per compile unit (sources plus a shared pool of
//! headers: compile-like fan-in), a final `ld` per project linking all its
//! objects (the fan-in that makes the worst-case ancestry), long fork/exec
//! chains, network fetches over sockets, pipelines, and in-band loss records.
//! The same seed always yields the same bytes.

use anyhow::Result;
use std::io::Write;

/// splitmix64: tiny, fast, and stable across platforms and releases.
pub struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

#[derive(Debug, Clone)]
pub struct SynthConfig {
    pub seed: u64,
    /// Compile units over all projects (each adds ~9 nodes and ~19 events).
    pub units: u64,
    /// Units in the largest project (its link output is the worst-case ancestry).
    pub largest_project: u64,
    /// Units per ordinary project are drawn from this range.
    pub project_units: (u64, u64),
    /// Headers in each project's shared pool.
    pub headers_per_project: u64,
    /// Headers read per compile unit are drawn from this range.
    pub headers_per_unit: (u64, u64),
    /// Number and depth of nested fork+exec chains.
    pub chains: u64,
    pub chain_depth: u64,
    /// One loss record per this many events (0: none).
    pub loss_every: u64,
}

impl SynthConfig {
    /// Sized to pass LPM's 6.5 M nodes / 6.75 M edges.
    pub fn lpm(seed: u64) -> Self {
        Self {
            seed,
            units: 730_000,
            largest_project: 2_150,
            project_units: (150, 1_500),
            headers_per_project: 400,
            headers_per_unit: (1, 5),
            chains: 4,
            chain_depth: 5_000,
            loss_every: 1_000_000,
        }
    }
    /// The same mix, scaled down (for tests and quick runs).
    pub fn scaled(seed: u64, fraction: f64) -> Self {
        let mut c = Self::lpm(seed);
        c.units = ((c.units as f64 * fraction) as u64).max(50);
        c.largest_project =
            ((c.largest_project as f64 * fraction.sqrt()) as u64).clamp(10, c.units);
        c.project_units = (
            ((150.0 * fraction.sqrt()) as u64).max(5),
            ((1_500.0 * fraction.sqrt()) as u64).max(10),
        );
        c.chain_depth = ((c.chain_depth as f64 * fraction.sqrt()) as u64).max(5);
        c.loss_every = ((c.loss_every as f64 * fraction) as u64).max(500);
        c
    }
}

/// What the generator knows about its own output, for the benchmark.
#[derive(Debug, Clone, Default)]
pub struct SynthReport {
    pub events: u64,
    pub losses: u64,
    pub lines: u64,
    /// Link outputs, largest project first (candidates for the worst-case ancestry).
    pub link_outputs: Vec<(String, u64)>,
    /// Files written at the bottom of each long chain.
    pub chain_outputs: Vec<String>,
}

pub const SYNTH_BOOT: &str = "synthetic-boot-0000";
const CPUS: u64 = 16;

struct Gen<W: Write> {
    rng: Rng,
    out: W,
    time_ns: u64,
    seq: [u64; CPUS as usize],
    next_pid: u32,
    report: SynthReport,
    loss_every: u64,
    line: String,
    /// The workflow the next events belong to (0: the next event starts one),
    /// as the collector names it (docs/workflows.md).
    workflow: u64,
}

impl<W: Write> Gen<W> {
    fn pid(&mut self) -> u32 {
        let p = self.next_pid;
        // Wrap like pid_max does; exits are always recorded so reuse is safe.
        self.next_pid = if p >= 4_000_000 { 1000 } else { p + 1 };
        p
    }

    /// Writes one event; `extra` is pre-rendered JSON members starting with a comma.
    fn ev(
        &mut self,
        pid: u32,
        ppid: u32,
        comm: &str,
        syscall: &str,
        category: &str,
        extra: &str,
    ) -> Result<()> {
        use std::fmt::Write as _;
        self.time_ns += self.rng.range(200, 20_000);
        let cpu = self.rng.next_u64() % CPUS;
        self.seq[cpu as usize] += 1;
        let seq = self.seq[cpu as usize];
        let id = (cpu << 48) | seq;
        if self.workflow == 0 {
            self.workflow = id;
        }
        let workflow = self.workflow;
        self.line.clear();
        let _ = writeln!(
            self.line,
            "{{\"type\":\"event\",\"id\":{id},\"cpu\":{cpu},\"seq\":{seq},\"time_ns\":{},\"pid\":{pid},\"tid\":{pid},\"ppid\":{ppid},\"uid\":1000,\"gid\":1000,\"euid\":1000,\"egid\":1000,\"comm\":\"{comm}\",\"syscall\":\"{syscall}\",\"category\":\"{category}\",\"critical\":false{extra},\"workflow\":{workflow}}}",
            self.time_ns
        );
        self.out.write_all(self.line.as_bytes())?;
        self.report.events += 1;
        self.report.lines += 1;
        if self.loss_every > 0 && self.report.events.is_multiple_of(self.loss_every) {
            // A burst the consumer could not keep up with: a seq gap on one CPU.
            let cpu = self.rng.next_u64() % CPUS;
            let count = self.rng.range(10, 5_000);
            let first = self.seq[cpu as usize] + 1;
            self.seq[cpu as usize] += count;
            let start = self.time_ns;
            self.time_ns += self.rng.range(1_000, 100_000);
            writeln!(
                self.out,
                "{{\"type\":\"loss\",\"cpu\":{cpu},\"first_seq\":{first},\"last_seq\":{},\"count\":{count},\"category\":\"events\",\"start_ns\":{start},\"end_ns\":{}}}",
                first + count - 1,
                self.time_ns
            )?;
            self.report.losses += 1;
            self.report.lines += 1;
        }
        Ok(())
    }

    fn fork(&mut self, parent: u32, pparent: u32, comm: &str) -> Result<u32> {
        let child = self.pid();
        self.ev(
            parent,
            pparent,
            comm,
            "clone",
            "process",
            &format!(",\"ret\":{child},\"child_pid\":{child}"),
        )?;
        Ok(child)
    }

    fn exec(&mut self, pid: u32, ppid: u32, comm: &str, path: &str, argv: &str) -> Result<()> {
        self.ev(
            pid,
            ppid,
            comm,
            "execve",
            "process",
            &format!(",\"ret\":0,\"path\":\"{path}\",\"argv\":[{argv}]"),
        )
    }

    fn exit(&mut self, pid: u32, ppid: u32, comm: &str) -> Result<()> {
        self.ev(pid, ppid, comm, "exit_group", "process", "")
    }

    fn read_path(&mut self, pid: u32, ppid: u32, comm: &str, fd: i32, path: &str) -> Result<()> {
        let bytes = self.rng.range(512, 65_536);
        self.ev(pid, ppid, comm, "read", "file", &format!(",\"ret\":{bytes},\"fd\":{fd},\"path\":\"{path}\",\"count\":1,\"bytes\":{bytes},\"first\":true"))
    }

    fn write_path(
        &mut self,
        pid: u32,
        ppid: u32,
        comm: &str,
        fd: i32,
        path: Option<&str>,
    ) -> Result<()> {
        let bytes = self.rng.range(512, 65_536);
        let p = path
            .map(|p| format!(",\"path\":\"{p}\""))
            .unwrap_or_default();
        self.ev(
            pid,
            ppid,
            comm,
            "write",
            "file",
            &format!(
                ",\"ret\":{bytes},\"fd\":{fd}{p},\"count\":1,\"bytes\":{bytes},\"first\":true"
            ),
        )
    }

    fn open(
        &mut self,
        pid: u32,
        ppid: u32,
        comm: &str,
        fd: i32,
        path: &str,
        flags: u32,
    ) -> Result<()> {
        self.ev(
            pid,
            ppid,
            comm,
            "openat",
            "file",
            &format!(
                ",\"ret\":{fd},\"fd\":{fd},\"path\":\"{path}\",\"args\":{{\"flags\":{flags}}}"
            ),
        )
    }

    fn compile_unit(
        &mut self,
        make: u32,
        make_parent: u32,
        project: u64,
        unit: u64,
        headers: u64,
        hdr_range: (u64, u64),
    ) -> Result<String> {
        let src = format!("/build/p{project}/src/u{unit}.c");
        let obj = format!("/build/p{project}/obj/u{unit}.o");
        let tmp = format!("/tmp/cc{project}_{unit}.s");
        let c = self.fork(make, make_parent, "make")?;
        self.exec(
            c,
            make,
            "gcc",
            "/usr/bin/gcc",
            &format!("\"gcc\",\"-c\",\"{src}\""),
        )?;
        let c2 = self.fork(c, make, "gcc")?;
        self.exec(
            c2,
            c,
            "cc1",
            "/usr/lib/gcc/x86_64-linux-gnu/12/cc1",
            &format!("\"cc1\",\"{src}\""),
        )?;
        self.open(c2, c, "cc1", 3, &src, 0)?;
        self.read_path(c2, c, "cc1", 3, &src)?;
        let k = self.rng.range(hdr_range.0, hdr_range.1);
        for _ in 0..k {
            let h = self.rng.next_u64() % headers;
            // A few system headers are shared by every project; the rest are the project's own.
            let path = if h.is_multiple_of(10) {
                format!("/usr/include/h{h}.h")
            } else {
                format!("/build/p{project}/include/h{h}.h")
            };
            self.read_path(c2, c, "cc1", 5, &path)?;
        }
        self.open(c2, c, "cc1", 4, &tmp, 0o1101)?;
        self.write_path(c2, c, "cc1", 4, None)?; // fd only: the store resolves it from the openat
        self.exit(c2, c, "cc1")?;
        let c3 = self.fork(c, make, "gcc")?;
        self.exec(
            c3,
            c,
            "as",
            "/usr/bin/as",
            &format!("\"as\",\"-o\",\"{obj}\",\"{tmp}\""),
        )?;
        self.read_path(c3, c, "as", 3, &tmp)?;
        self.write_path(c3, c, "as", 4, Some(&obj))?;
        self.exit(c3, c, "as")?;
        self.ev(
            c,
            make,
            "gcc",
            "unlink",
            "file",
            &format!(",\"ret\":0,\"path\":\"{tmp}\""),
        )?;
        self.exit(c, make, "gcc")?;
        Ok(obj)
    }
}

/// Writes the stream to `out`; `progress(events)` is called every 100k events.
pub fn generate<W: Write>(
    cfg: &SynthConfig,
    out: W,
    mut progress: impl FnMut(u64),
) -> Result<SynthReport> {
    let mut g = Gen {
        rng: Rng::new(cfg.seed),
        out,
        time_ns: 1_763_700_000_000_000_000,
        seq: [0; CPUS as usize],
        next_pid: 1000,
        report: SynthReport::default(),
        loss_every: cfg.loss_every,
        line: String::with_capacity(512),
        workflow: 0,
    };
    writeln!(g.out, "{{\"type\":\"boot\",\"boot_id\":\"{SYNTH_BOOT}\"}}")?;
    g.report.lines += 1;
    let (init, shell) = (1u32, 900u32);
    let mut last_progress = 0;

    // Long fork/exec chains (build scripts calling scripts calling scripts).
    for chain in 0..cfg.chains {
        let mut parent = shell;
        let mut pparent = init;
        for depth in 0..cfg.chain_depth {
            let child = g.fork(parent, pparent, "sh")?;
            g.exec(
                child,
                parent,
                "sh",
                "/bin/sh",
                &format!("\"sh\",\"step{depth}.sh\""),
            )?;
            pparent = parent;
            parent = child;
        }
        let out = format!("/var/log/chain{chain}.log");
        g.write_path(parent, pparent, "sh", 1, Some(&out))?;
        g.report.chain_outputs.push(out);
    }

    let mut done = 0u64;
    let mut project = 0u64;
    while done < cfg.units {
        let size = if project == 0 {
            cfg.largest_project
        } else {
            g.rng.range(cfg.project_units.0, cfg.project_units.1)
        };
        let size = size.min(cfg.units - done).max(1);
        let make = g.fork(shell, init, "bash")?;
        // Each project's build is a job of its own.
        g.workflow = 0;
        g.exec(
            make,
            shell,
            "make",
            "/usr/bin/make",
            &format!("\"make\",\"-C\",\"/build/p{project}\""),
        )?;
        // Fetch the sources over the network and unpack them through a pipe.
        let fetch = g.fork(make, shell, "make")?;
        g.exec(fetch, make, "curl", "/usr/bin/curl", "\"curl\",\"-O\"")?;
        let addr = format!(
            "10.{}.{}.{}:443",
            project % 200,
            (project / 200) % 250,
            1 + project % 250
        );
        g.ev(
            fetch,
            make,
            "curl",
            "connect",
            "network",
            &format!(",\"ret\":0,\"args\":{{\"fd\":5}},\"addr\":\"{addr}\""),
        )?;
        g.ev(fetch, make, "curl", "recvfrom", "network", ",\"ret\":1400,\"fd\":5,\"path\":\"socket:[77]\",\"count\":40,\"bytes\":56000,\"first\":true")?;
        let tarball = format!("/build/p{project}/src.tar");
        g.write_path(fetch, make, "curl", 6, Some(&tarball))?;
        g.exit(fetch, make, "curl")?;
        for unit in 0..size {
            g.compile_unit(
                make,
                shell,
                project,
                unit,
                cfg.headers_per_project,
                cfg.headers_per_unit,
            )?;
            if g.report.events - last_progress >= 100_000 {
                last_progress = g.report.events;
                progress(g.report.events);
            }
        }
        let ld = g.fork(make, shell, "make")?;
        g.exec(ld, make, "ld", "/usr/bin/ld", "\"ld\",\"-o\",\"out.bin\"")?;
        for unit in 0..size {
            g.read_path(
                ld,
                make,
                "ld",
                3,
                &format!("/build/p{project}/obj/u{unit}.o"),
            )?;
        }
        let out = format!("/build/p{project}/out.bin");
        g.write_path(ld, make, "ld", 4, Some(&out))?;
        g.exit(ld, make, "ld")?;
        g.exit(make, shell, "make")?;
        g.report.link_outputs.push((out, size));
        done += size;
        project += 1;
    }
    g.report
        .link_outputs
        .sort_by_key(|l| std::cmp::Reverse(l.1));
    g.out.flush()?;
    progress(g.report.events);
    Ok(g.report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_parseable() {
        let cfg = SynthConfig::scaled(7, 0.0005);
        let mut a = Vec::new();
        let mut b = Vec::new();
        let ra = generate(&cfg, &mut a, |_| {}).unwrap();
        generate(&cfg, &mut b, |_| {}).unwrap();
        assert_eq!(a, b, "same seed, same bytes");
        let text = String::from_utf8(a).unwrap();
        assert_eq!(text.lines().count() as u64, ra.lines);
        for l in text.lines() {
            crate::record::parse_line(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        }
        let mut c = Vec::new();
        generate(&SynthConfig::scaled(8, 0.0005), &mut c, |_| {}).unwrap();
        assert_ne!(text.as_bytes(), &c[..], "another seed, another stream");
    }
}
