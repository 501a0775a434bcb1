//! Tamper evidence for the event stream (docs/tamper-evidence.md): the
//! stream is cut into batches of lines, and after each batch comes a `seal`
//! line that hash-chains it to the batch before and signs it with the host's
//! Ed25519 key. `custos verify` re-computes the chain and reports the first
//! batch altered, reordered, inserted or deleted, and a stream cut short.
//!
//! The format has one definition, here: the [`Sealer`] writes it, the
//! [`Verifier`] reads it.
//!
//! * A batch's `content` hash is BLAKE3 over its lines' bytes, newlines
//!   included, exactly as written. (BLAKE3 rather than SHA-256: several
//!   GB/s on one core, so sealing costs the writer thread little at line
//!   rate.)
//! * Its chain hash is BLAKE3 over [`DOMAIN`], the stream id, the batch
//!   number, the previous batch's chain hash (zeros for batch 0), the line
//!   count, the first line's number and the content hash: a batch moved,
//!   dropped or replayed no longer fits its neighbours.
//! * The signature covers the chain hash with every field of the seal
//!   (time range, `final`), so no field can be edited without the key.
//!
//! Loss records are lines like any other: hiding a loss breaks its batch.

use anyhow::{bail, Context, Result};
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier as _, VerifyingKey};
use serde::{Deserialize, Serialize};
use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Separates Custos seal hashes and signatures from any other use of the key.
pub const DOMAIN: &[u8] = b"custos-seal-v1\0";
/// Lines per batch unless `--seal-every` says otherwise: a signature per
/// 4,096 lines costs about 0.1 byte per line, and a batch of a busy stream
/// closes within milliseconds.
pub const DEFAULT_EVERY: u64 = 4096;
/// A batch of a quiet stream is sealed this long after its first line at
/// the latest (at the writer's next flush), so a recent line is never long
/// unsealed.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(1);

pub mod series;

/// Feeds each line of `input` to `line`, newline included, as the stream
/// holds it: verifiers read bytes, so a line that is not UTF-8 is their
/// finding, not a read error. `source` names the input in errors.
pub fn for_each_line(
    mut input: impl io::BufRead,
    source: &Path,
    mut line: impl FnMut(&[u8]),
) -> Result<()> {
    let mut buf = Vec::with_capacity(4096);
    loop {
        buf.clear();
        let n = input
            .read_until(b'\n', &mut buf)
            .with_context(|| format!("reading {}", source.display()))?;
        if n == 0 {
            return Ok(());
        }
        line(&buf);
    }
}

/// The host's signing key, kept as its 32-byte secret in a file only its
/// owner can read.
pub struct SealKey {
    signing: SigningKey,
}

impl SealKey {
    /// Where the key lives unless `--seal-key` names a file: root's in
    /// /var/lib/custos, anyone else's under their XDG data directory.
    pub fn default_path() -> PathBuf {
        if let Some(p) = std::env::var_os("CUSTOS_SEAL_KEY") {
            return PathBuf::from(p);
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            return PathBuf::from("/var/lib/custos/seal.key");
        }
        let data = std::env::var_os("XDG_DATA_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
            .unwrap_or_else(|| PathBuf::from("."));
        data.join("custos/seal.key")
    }

    /// Reads the key at `path`, or creates it there (mode 0600, its directory
    /// 0700) when there is none. Returns whether it was created.
    pub fn load_or_create(path: &Path) -> Result<(SealKey, bool)> {
        match std::fs::File::open(path) {
            Ok(f) => {
                let key = Self::read(f, path)?;
                // A key made before public halves were written gets one; where
                // nothing can be written (the VM's read-only root) it stays without.
                let public = Self::public_path(path);
                if !public.exists() {
                    let _ = std::fs::write(&public, key.public_hex() + "\n");
                }
                return Ok((key, false));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(e).with_context(|| format!("opening the seal key {}", path.display()))
            }
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .with_context(|| format!("creating {}", dir.display()))?;
        }
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret)
            .map_err(|e| anyhow::anyhow!("no randomness for a new seal key: {e}"))?;
        // create_new: two collectors starting at once never overwrite each other's key.
        let created = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path);
        match created {
            Ok(mut f) => {
                f.write_all(&secret)
                    .and_then(|()| f.sync_all())
                    .with_context(|| format!("writing the seal key {}", path.display()))?;
                let key = SealKey {
                    signing: SigningKey::from_bytes(&secret),
                };
                // The public half beside it, for `custos verify --key FILE`.
                let public = Self::public_path(path);
                std::fs::write(&public, key.public_hex() + "\n")
                    .with_context(|| format!("writing {}", public.display()))?;
                Ok((key, true))
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let f = std::fs::File::open(path)
                    .with_context(|| format!("opening the seal key {}", path.display()))?;
                Ok((Self::read(f, path)?, false))
            }
            Err(e) => Err(e).with_context(|| format!("creating the seal key {}", path.display())),
        }
    }

    fn read(mut f: std::fs::File, path: &Path) -> Result<SealKey> {
        use std::os::unix::fs::MetadataExt;
        let meta = f.metadata()?;
        if meta.mode() & 0o077 != 0 {
            bail!(
                "the seal key {} can be read by others (mode {:o}): anyone who reads it can forge seals; \
                 chmod 600 it, or move it away to have a new key made",
                path.display(),
                meta.mode() & 0o777
            );
        }
        let mut secret = Vec::new();
        f.read_to_end(&mut secret)
            .with_context(|| format!("reading the seal key {}", path.display()))?;
        let secret: [u8; 32] = secret.try_into().map_err(|v: Vec<u8>| {
            anyhow::anyhow!(
                "the seal key {} is {} bytes, not 32",
                path.display(),
                v.len()
            )
        })?;
        Ok(SealKey {
            signing: SigningKey::from_bytes(&secret),
        })
    }

    /// The key at `path` (default: [`SealKey::default_path`]), made on first
    /// use; says so on stderr, as `program`, when it made one.
    pub fn open(path: Option<&Path>, program: &str) -> Result<SealKey> {
        let path = path.map_or_else(Self::default_path, Path::to_path_buf);
        let (key, created) = Self::load_or_create(&path)?;
        if created {
            eprintln!(
                "{program}: made a new seal key {} (public key {}, also in {})",
                path.display(),
                key.public_hex(),
                Self::public_path(&path).display()
            );
        }
        Ok(key)
    }

    /// Where the public key is written beside the key: `seal.key` → `seal.pub`.
    pub fn public_path(key: &Path) -> PathBuf {
        key.with_extension("pub")
    }

    /// The public key, as seals carry it and `custos verify --key` takes it.
    pub fn public_hex(&self) -> String {
        hex::encode(self.signing.verifying_key().as_bytes())
    }
}

/// A seal line, as written (field order fixed by this struct).
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct SealLine {
    #[serde(rename = "type")]
    pub ty: String,
    pub v: u32,
    pub stream: String,
    pub batch: u64,
    /// Number of the batch's first line in the stream (seal lines not counted).
    pub first_line: u64,
    pub lines: u64,
    /// `time_ns` of the batch's first and last lines (0 if neither has one;
    /// the stream is in time order, docs/event-schema.md "Order").
    pub first_time_ns: u64,
    pub last_time_ns: u64,
    /// The stream's last batch, written when the collector stopped cleanly.
    #[serde(rename = "final")]
    pub last: bool,
    pub prev: String,
    pub hash: String,
    pub key: String,
    pub sig: String,
}

struct Fields {
    stream: [u8; 16],
    batch: u64,
    first_line: u64,
    lines: u64,
    first_time_ns: u64,
    last_time_ns: u64,
    last: bool,
    prev: [u8; 32],
}

impl Fields {
    /// The seal line of these fields over a batch whose content hash is
    /// `content`, signed with `key`, and its chain hash (the next seal's
    /// `prev`).
    fn seal_line(&self, content: &[u8; 32], key: &SealKey) -> (SealLine, [u8; 32]) {
        let hash = self.chain_hash(content);
        let sig = key.signing.sign(&self.message(&hash));
        let line = SealLine {
            ty: "seal".into(),
            v: 1,
            stream: hex::encode(self.stream),
            batch: self.batch,
            first_line: self.first_line,
            lines: self.lines,
            first_time_ns: self.first_time_ns,
            last_time_ns: self.last_time_ns,
            last: self.last,
            prev: hex::encode(self.prev),
            hash: hex::encode(hash),
            key: key.public_hex(),
            sig: hex::encode(sig.to_bytes()),
        };
        (line, hash)
    }

    fn chain_hash(&self, content: &[u8; 32]) -> [u8; 32] {
        let mut h = blake3::Hasher::new();
        h.update(DOMAIN);
        h.update(&self.stream);
        h.update(&self.batch.to_le_bytes());
        h.update(&self.prev);
        h.update(&self.lines.to_le_bytes());
        h.update(&self.first_line.to_le_bytes());
        h.update(content);
        *h.finalize().as_bytes()
    }

    /// What the signature covers: every field and the chain hash.
    fn message(&self, hash: &[u8; 32]) -> Vec<u8> {
        let mut m = Vec::with_capacity(128);
        m.extend_from_slice(DOMAIN);
        m.extend_from_slice(b"seal");
        m.extend_from_slice(&self.stream);
        for v in [
            self.batch,
            self.first_line,
            self.lines,
            self.first_time_ns,
            self.last_time_ns,
        ] {
            m.extend_from_slice(&v.to_le_bytes());
        }
        m.push(self.last as u8);
        m.extend_from_slice(&self.prev);
        m.extend_from_slice(hash);
        m
    }
}

/// The lines of the batch being read or written: their content hash, count
/// and time range.
struct Batch {
    content: blake3::Hasher,
    lines: u64,
    first_time_ns: u64,
    last_time_ns: u64,
    /// A line has begun whose end has not come yet; `head` holds its start
    /// (up to [`HEAD`] bytes).
    partial: bool,
    head: Vec<u8>,
}

/// Enough of a line to find its `time_ns` (the fifth field of an event).
const HEAD: usize = 160;

/// Up to this many missing batches in a row are one finding each; a longer
/// gap (a forged numbering, up to u64::MAX) is one finding for all.
const MISSING_ONE_BY_ONE: u64 = 1 << 16;

impl Batch {
    fn new() -> Self {
        Batch {
            content: blake3::Hasher::new(),
            lines: 0,
            first_time_ns: 0,
            last_time_ns: 0,
            partial: false,
            head: Vec::with_capacity(HEAD),
        }
    }

    /// Takes `bytes` of the stream (any cut) up to the end of its `room`-th
    /// line, or all of them: returns how many bytes it took. Lines are only
    /// counted (a vectorised newline count), and the time read from the
    /// batch's first line and from the last line of each piece: the stream
    /// is in time order, so those bound the batch (reading every line's time
    /// cost more than hashing it).
    fn take_lines(&mut self, bytes: &[u8], room: u64) -> usize {
        let newlines = memchr::memchr_iter(b'\n', bytes).count() as u64;
        let (taken, lines) = if newlines < room {
            (bytes.len(), newlines)
        } else {
            (
                memchr::memchr_iter(b'\n', bytes)
                    .nth(room as usize - 1)
                    .map_or(bytes.len(), |nl| nl + 1),
                room,
            )
        };
        let part = &bytes[..taken];
        self.content.update(part);
        let last_nl = memchr::memrchr(b'\n', part);
        if let Some(last_nl) = last_nl {
            if self.lines == 0 {
                let first_nl = memchr::memchr(b'\n', part).expect("a line ends here");
                self.note(self.time_of_line_ending(part, first_nl));
            }
            self.note(self.time_of_line_ending(part, last_nl));
            self.lines += lines;
            self.partial = false;
            self.head.clear();
        }
        let tail = last_nl.map_or(0, |nl| nl + 1);
        if tail < part.len() {
            self.partial = true;
            let room = HEAD.saturating_sub(self.head.len());
            let rest = &part[tail..];
            self.head.extend_from_slice(&rest[..rest.len().min(room)]);
        }
        taken
    }

    /// Takes `bytes` of the stream, whatever lines they hold.
    fn take(&mut self, bytes: &[u8]) {
        self.take_lines(bytes, u64::MAX);
    }

    /// The time of the line that ends at `part[nl]` (it may have begun in an
    /// earlier piece, then its start is in `head`).
    fn time_of_line_ending(&self, part: &[u8], nl: usize) -> Option<u64> {
        match memchr::memrchr(b'\n', &part[..nl]) {
            Some(prev) => time_ns_of(&part[prev + 1..nl.min(prev + 1 + HEAD)]),
            None if self.partial => {
                let mut h = self.head.clone();
                h.extend_from_slice(&part[..nl.min(HEAD)]);
                time_ns_of(&h[..h.len().min(HEAD)])
            }
            None => time_ns_of(&part[..nl.min(HEAD)]),
        }
    }

    fn note(&mut self, t: Option<u64>) {
        if let Some(t) = t {
            if self.first_time_ns == 0 || t < self.first_time_ns {
                self.first_time_ns = t;
            }
            self.last_time_ns = self.last_time_ns.max(t);
        }
    }

    fn content_hash(&self) -> [u8; 32] {
        *self.content.finalize().as_bytes()
    }
}

/// The value of the line's `"time_ns":` field, if it has one.
fn time_ns_of(line: &[u8]) -> Option<u64> {
    // Built once: building the searcher at each call cost more than the search.
    static TIME_NS: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"time_ns\":"));
    let at = TIME_NS.find(line)? + 10;
    let digits = line[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&line[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

/// Writes the seals into a stream passing through it (in the output writer's
/// thread, off the consumer's path).
pub struct Sealer {
    chain: BatchSealer,
    every: u64,
    max_age: Duration,
    batch: Batch,
    opened: Option<Instant>,
    /// An output cut into files at batch boundaries (rotation), and whether
    /// it has been told of the first boundary, the stream's start.
    cuts: Option<Box<dyn series::Cuts>>,
    started: bool,
}

impl Sealer {
    pub fn new(key: SealKey, every: u64, max_age: Duration) -> Result<Self> {
        if every == 0 {
            bail!("--seal-every must be at least 1 line");
        }
        Ok(Sealer {
            chain: BatchSealer::new(key)?,
            every,
            max_age,
            batch: Batch::new(),
            opened: None,
            cuts: None,
            started: false,
        })
    }

    /// Tells `cuts` of every batch boundary (the stream's start, each seal):
    /// it may begin a new file there, whose header line then opens the next
    /// batch (docs/tamper-evidence.md, "Rotated series").
    pub fn cut_by(mut self, cuts: Box<dyn series::Cuts>) -> Self {
        self.cuts = Some(cuts);
        self
    }

    /// Passes `bytes` on to `out`, with a seal after every `every` lines.
    pub fn write(&mut self, mut bytes: &[u8], out: &mut dyn Write) -> io::Result<()> {
        self.start(out)?;
        while !bytes.is_empty() {
            self.opened.get_or_insert_with(Instant::now);
            let taken = self.batch.take_lines(bytes, self.every - self.batch.lines);
            out.write_all(&bytes[..taken])?;
            bytes = &bytes[taken..];
            if self.batch.lines == self.every {
                self.seal(out, false)?;
            }
        }
        Ok(())
    }

    /// Seals the batch if its first line is older than the age limit and it
    /// ends on a whole line (called at the writer's flushes).
    pub fn tick(&mut self, out: &mut dyn Write) -> io::Result<()> {
        self.start(out)?;
        if self.opened.is_some_and(|t| t.elapsed() >= self.max_age)
            && self.batch.lines > 0
            && !self.batch.partial
        {
            self.seal(out, false)?;
        }
        Ok(())
    }

    /// The last seal: the stream ended cleanly. (An unfinished last line is
    /// sealed as it is; `custos verify` reports it.)
    pub fn finish(&mut self, out: &mut dyn Write) -> io::Result<()> {
        self.start(out)?;
        self.seal(out, true)
    }

    /// The stream's first boundary, before its first line.
    fn start(&mut self, out: &mut dyn Write) -> io::Result<()> {
        if !self.started {
            self.started = true;
            self.boundary(out, false)?;
        }
        Ok(())
    }

    /// Tells the cuts (if any) that a batch ends here; a header line it
    /// returns is the next batch's first line.
    fn boundary(&mut self, out: &mut dyn Write, last: bool) -> io::Result<()> {
        let Some(cuts) = &mut self.cuts else {
            return Ok(());
        };
        let at = series::Boundary {
            batch: self.chain.batch_no,
            first_line: self.chain.next_line,
        };
        if let Some(header) = cuts.boundary(at, last)? {
            debug_assert!(header.ends_with(b"\n") && self.batch.lines == 0);
            self.opened.get_or_insert_with(Instant::now);
            self.batch.take(&header);
            out.write_all(&header)?;
            // A batch of one line (`--seal-every 1`) is full already.
            if self.batch.lines == self.every {
                self.seal(out, false)?;
            }
        }
        Ok(())
    }

    fn seal(&mut self, out: &mut dyn Write, last: bool) -> io::Result<()> {
        let batch = std::mem::replace(&mut self.batch, Batch::new());
        let line = self.chain.seal(
            &batch.content_hash(),
            batch.lines,
            batch.first_time_ns,
            batch.last_time_ns,
            last,
        );
        let mut text = serde_json::to_vec(&line).map_err(io::Error::other)?;
        text.push(b'\n');
        out.write_all(&text)?;
        self.opened = None;
        self.boundary(out, last)
    }
}

/// The chain itself, for batches whose content hash the caller computes:
/// the stream's [`Sealer`] hashes its lines; the store hashes what a batch
/// committed (crates/custos-store, docs/tamper-evidence.md).
pub struct BatchSealer {
    key: SealKey,
    stream: [u8; 16],
    batch_no: u64,
    prev: [u8; 32],
    next_line: u64,
}

/// Where a chain stands: what the next seal builds on.
#[derive(Clone, Copy, Debug)]
pub struct ChainState {
    batch_no: u64,
    prev: [u8; 32],
    next_line: u64,
}

impl BatchSealer {
    /// Where the chain stands now (to go back to it if the batch sealed
    /// next is not kept, e.g. a rolled-back transaction).
    pub fn state(&self) -> ChainState {
        ChainState {
            batch_no: self.batch_no,
            prev: self.prev,
            next_line: self.next_line,
        }
    }

    pub fn set_state(&mut self, s: ChainState) {
        (self.batch_no, self.prev, self.next_line) = (s.batch_no, s.prev, s.next_line);
    }
}

impl ChainState {
    /// The number the next seal takes.
    pub fn batch_no(&self) -> u64 {
        self.batch_no
    }
}

impl BatchSealer {
    /// A new chain, with a random stream id.
    pub fn new(key: SealKey) -> Result<Self> {
        let mut stream = [0u8; 16];
        getrandom::fill(&mut stream)
            .map_err(|e| anyhow::anyhow!("no randomness for a stream id: {e}"))?;
        Ok(BatchSealer {
            key,
            stream,
            batch_no: 0,
            prev: [0; 32],
            next_line: 0,
        })
    }

    /// The seal of the next batch: `content` is its content hash, `lines`
    /// how many items it holds, `first_time_ns`..`last_time_ns` their times.
    pub fn seal(
        &mut self,
        content: &[u8; 32],
        lines: u64,
        first_time_ns: u64,
        last_time_ns: u64,
        last: bool,
    ) -> SealLine {
        let f = Fields {
            stream: self.stream,
            batch: self.batch_no,
            first_line: self.next_line,
            lines,
            first_time_ns,
            last_time_ns,
            last,
            prev: self.prev,
        };
        let (line, hash) = f.seal_line(content, &self.key);
        self.prev = hash;
        self.batch_no += 1;
        self.next_line += lines;
        line
    }
}

/// One thing `custos verify` found wrong, in stream order.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Finding {
    /// altered | forged-seal | reordered | deleted | replayed | inserted | unsealed-tail | truncated | foreign-key | other-stream | not-sealed
    pub kind: &'static str,
    /// The batch it concerns, when known.
    pub batch: Option<u64>,
    /// Stream lines (seals not counted) and times the batch covers, as far as known.
    pub first_line: Option<u64>,
    pub last_line: Option<u64>,
    pub first_time_ns: Option<u64>,
    pub last_time_ns: Option<u64>,
    pub message: String,
}

impl Finding {
    /// A finding about the stream as a whole, at no batch or line.
    pub fn unplaced(kind: &'static str, message: impl Into<String>) -> Self {
        Finding {
            kind,
            batch: None,
            first_line: None,
            last_line: None,
            first_time_ns: None,
            last_time_ns: None,
            message: message.into(),
        }
    }
}

/// What `custos verify` says of a whole stream.
#[derive(Serialize, Debug)]
pub struct Report {
    pub intact: bool,
    pub lines: u64,
    pub batches_verified: u64,
    pub key: Option<String>,
    pub stream: Option<String>,
    pub finished: bool,
    pub findings: Vec<Finding>,
}

struct SeenBatch {
    hash: [u8; 32],
    first_line: u64,
    first_time_ns: u64,
    last_time_ns: u64,
}

/// Re-computes a sealed stream's chain line by line.
pub struct Verifier {
    pinned: Option<VerifyingKey>,
    key: Option<VerifyingKey>,
    stream: Option<[u8; 16]>,
    batch: Batch,
    /// Number of the next data line (seals not counted).
    line_no: u64,
    batch_first_line: u64,
    /// Every batch with a genuine seal: its chain hash, first line and time range.
    seen: std::collections::BTreeMap<u64, SeenBatch>,
    /// Seal lines met, genuine or not; and those that held.
    seals: u64,
    verified: u64,
    finished: bool,
    last_time_ns: u64,
    findings: Vec<Finding>,
    /// The chain's first batch here: 0, or where a rotated series' oldest
    /// remaining segment starts ([`Verifier::resume_at`]).
    start_batch: u64,
    /// The batch of the last seal that held, if any.
    last_sealed: Option<u64>,
}

impl Verifier {
    /// `pinned`: the public key the seals must carry (hex), if the caller knows it.
    pub fn new(pinned: Option<&str>) -> Result<Self> {
        let pinned = pinned.map(parse_key).transpose()?;
        Ok(Verifier {
            pinned,
            key: None,
            stream: None,
            batch: Batch::new(),
            line_no: 0,
            batch_first_line: 0,
            seen: Default::default(),
            seals: 0,
            verified: 0,
            finished: false,
            last_time_ns: 0,
            findings: Vec::new(),
            start_batch: 0,
            last_sealed: None,
        })
    }

    /// The stream read from here on begins at `batch`, stream line `line`
    /// (a rotated series whose older segments were removed): the batches
    /// before it are not reported missing, nor is the first batch's link to
    /// them checked. Called before the first line.
    pub fn resume_at(&mut self, batch: u64, line: u64) {
        self.start_batch = batch;
        self.line_no = line;
        self.batch_first_line = line;
    }

    /// The batch of the last seal that held (None before the first).
    pub fn last_sealed(&self) -> Option<u64> {
        self.last_sealed
    }

    /// Number of the next data line (seals not counted).
    pub fn line_no(&self) -> u64 {
        self.line_no
    }

    /// One line of the stream, its newline included (the last line of a
    /// file may lack it).
    pub fn line(&mut self, line: &[u8]) {
        if self.finished {
            self.finished = false;
            self.find("inserted", None, "lines follow the final seal", None);
        }
        if is_seal(line) && !line.ends_with(b"\n") {
            self.find(
                "truncated",
                None,
                "the file was cut inside a seal line",
                None,
            );
        } else if is_seal(line) {
            self.seals += 1;
            self.seal(line);
        } else {
            self.batch.take(line);
            if !line.ends_with(b"\n") {
                self.batch.take(b"\n");
                self.find(
                    "truncated",
                    None,
                    "the last line has no newline: the file was cut inside it",
                    None,
                );
            }
            self.line_no += 1;
        }
    }

    fn find(
        &mut self,
        kind: &'static str,
        batch: Option<u64>,
        message: &str,
        range: Option<(u64, u64, u64, u64)>,
    ) {
        let (first_line, last_line, t0, t1) = match range {
            Some((a, b, c, d)) => (
                Some(a),
                Some(b),
                Some(c).filter(|t| *t > 0),
                Some(d).filter(|t| *t > 0),
            ),
            None => (None, None, None, None),
        };
        self.findings.push(Finding {
            kind,
            batch,
            first_line,
            last_line,
            first_time_ns: t0,
            last_time_ns: t1,
            message: message.to_string(),
        });
    }

    fn seal(&mut self, line: &[u8]) {
        let batch = std::mem::replace(&mut self.batch, Batch::new());
        let content = batch.content_hash();
        self.check_seal(
            line,
            &content,
            batch.lines,
            batch.first_time_ns,
            batch.last_time_ns,
        );
    }

    /// A batch whose content hash the caller computed (see [`BatchSealer`]),
    /// with `lines` items and their times, and the seal that claims it.
    pub fn sealed_batch(
        &mut self,
        content: &[u8; 32],
        lines: u64,
        first_time_ns: u64,
        last_time_ns: u64,
        seal: &[u8],
    ) {
        if self.finished {
            self.finished = false;
            self.find("inserted", None, "batches follow the final seal", None);
        }
        self.seals += 1;
        self.line_no += lines;
        self.check_seal(seal, content, lines, first_time_ns, last_time_ns);
    }

    fn check_seal(
        &mut self,
        line: &[u8],
        content: &[u8; 32],
        lines: u64,
        first_time_ns: u64,
        last_time_ns: u64,
    ) {
        let first_line = std::mem::replace(&mut self.batch_first_line, self.line_no);
        let last_line = self.line_no.saturating_sub(1);
        let range = Some((first_line, last_line, first_time_ns, last_time_ns));
        let s: SealLine = match serde_json::from_slice(line) {
            Ok(s) => s,
            Err(e) => {
                return self.find(
                    "forged-seal",
                    None,
                    &format!("a seal line does not parse ({e}): it was altered"),
                    range,
                );
            }
        };
        let Ok(Decoded {
            key,
            stream,
            prev,
            hash,
            sig,
        }) = Decoded::of(&s)
        else {
            return self.find(
                "forged-seal",
                Some(s.batch),
                "a seal's fields are not well-formed hex: it was altered",
                range,
            );
        };
        let f = Fields {
            stream,
            batch: s.batch,
            first_line: s.first_line,
            lines: s.lines,
            first_time_ns: s.first_time_ns,
            last_time_ns: s.last_time_ns,
            last: s.last,
            prev,
        };
        let sealed = Some((
            s.first_line,
            // Unsigned yet (checked below): a crafted seal's numbers may
            // sum past u64; saturated, never wrapped (nor a panic).
            s.first_line.saturating_add(s.lines).saturating_sub(1),
            s.first_time_ns,
            s.last_time_ns,
        ));
        if s.v != 1 || key.verify(&f.message(&hash), &sig).is_err() {
            return self.find(
                "forged-seal",
                Some(s.batch),
                "the seal's signature does not match its fields: the seal was altered or forged",
                range,
            );
        }
        if self.pinned.is_some_and(|p| p != key) {
            return self.find(
                "foreign-key",
                Some(s.batch),
                &format!("sealed by key {}, not the key given", s.key),
                sealed,
            );
        }
        match self.key {
            None => self.key = Some(key),
            Some(k) if k != key => {
                return self.find(
                    "foreign-key",
                    Some(s.batch),
                    &format!("sealed by key {}, not the stream's first key", s.key),
                    sealed,
                );
            }
            Some(_) => {}
        }
        match self.stream {
            None => self.stream = Some(stream),
            Some(id) if id != stream => {
                return self.find(
                    "other-stream",
                    Some(s.batch),
                    "a batch of another stream (another collector run) was inserted",
                    sealed,
                );
            }
            Some(_) => {}
        }
        // The seal is genuine: its batch's lines must be the ones sealed.
        if f.chain_hash(content) != hash || lines != s.lines {
            self.find(
                "altered",
                Some(s.batch),
                &if lines == s.lines {
                    format!("batch {}'s lines differ from what was sealed", s.batch)
                } else {
                    format!("batch {}'s lines differ from what was sealed ({lines} lines found, {} sealed)", s.batch, s.lines)
                },
                sealed,
            );
        }
        if self.seen.contains_key(&s.batch) {
            self.find(
                "replayed",
                Some(s.batch),
                &format!("batch {} appears a second time", s.batch),
                sealed,
            );
        } else {
            // A stream sealed by a key of its own (none pinned) may number
            // its batches up to u64::MAX.
            let later = s
                .batch
                .checked_add(1)
                .and_then(|n| self.seen.range(n..).next())
                .map(|(b, _)| *b);
            if let Some(b) = later {
                self.find(
                    "reordered",
                    Some(s.batch),
                    &format!(
                        "batch {} comes after batch {b}: batches were moved",
                        s.batch
                    ),
                    sealed,
                );
            }
            // Each seal names the chain hash before it: with genuine
            // signatures a mismatch means a key that sealed two streams alike.
            let before = if s.batch == 0 {
                Some([0; 32])
            } else {
                self.seen.get(&(s.batch - 1)).map(|b| b.hash)
            };
            if before.is_some_and(|h| h != prev) {
                self.find(
                    "altered",
                    Some(s.batch),
                    &format!(
                        "batch {} does not follow batch {} in the chain",
                        s.batch,
                        s.batch.saturating_sub(1)
                    ),
                    sealed,
                );
            }
            self.seen.insert(
                s.batch,
                SeenBatch {
                    hash,
                    first_line: s.first_line,
                    first_time_ns: s.first_time_ns,
                    last_time_ns: s.last_time_ns,
                },
            );
        }
        self.verified += 1;
        self.last_sealed = Some(s.batch);
        self.finished = s.last;
        self.last_time_ns = s.last_time_ns.max(self.last_time_ns);
    }

    pub fn finish(mut self) -> Report {
        // Numbers the chain skipped: batches removed, lines and seal.
        let last = self.seen.keys().next_back().copied();
        // The gaps between the numbers seen, walked gap by gap: a crafted
        // stream may number its batches up to u64::MAX, and one finding per
        // missing number would never end.
        let mut expect = self.start_batch;
        let gaps: Vec<(u64, u64)> = self
            .seen
            .keys()
            .filter_map(|&b| {
                let gap = (expect < b).then(|| (expect, b - 1));
                expect = b.saturating_add(1);
                gap
            })
            .collect();
        for (first, end) in gaps {
            let before = self
                .seen
                .range(..first)
                .next_back()
                .map(|(_, s)| s.last_time_ns);
            let (line, t1) = self
                .seen
                .range(end + 1..)
                .next()
                .map_or((0, 0), |(_, s)| (s.first_line, s.first_time_ns));
            // One finding a batch, as many as a real run could have lost;
            // a longer gap is one finding.
            let each = if end - first < MISSING_ONE_BY_ONE {
                first..=end
            } else {
                first..=first
            };
            for b in each {
                self.findings.push(Finding {
                    kind: "deleted",
                    batch: Some(b),
                    first_line: None,
                    last_line: None,
                    first_time_ns: before.filter(|t| *t > 0),
                    last_time_ns: Some(t1).filter(|t| *t > 0),
                    message: if end - first < MISSING_ONE_BY_ONE {
                        format!("batch {b} is missing: its lines and its seal were removed (it stood before stream line {line})")
                    } else {
                        format!("batches {first} to {end} are missing ({} batches): their lines and seals were removed, or the numbers were forged (they stood before stream line {line})", (end - first).saturating_add(1))
                    },
                });
            }
        }
        // Saturated: after a seal numbered u64::MAX (forged) there is no next.
        let next = last.map_or(0, |b| b.saturating_add(1));
        if self.batch.lines > 0 {
            let (a, b) = (self.batch_first_line, self.line_no.saturating_sub(1));
            let (t0, t1) = (self.batch.first_time_ns, self.batch.last_time_ns);
            self.find(
                "unsealed-tail",
                Some(next),
                &format!("{} lines after the last seal are not sealed: added afterwards, or the stream was cut", self.batch.lines),
                Some((a, b, t0, t1)),
            );
        }
        if self.seals == 0 {
            self.find(
                "not-sealed",
                None,
                "no seal in the stream: it was written without sealing, or every seal was removed",
                None,
            );
        } else if self.verified > 0
            && !self.finished
            && !self.findings.iter().any(|f| f.kind == "inserted")
        {
            self.find(
                "truncated",
                Some(next),
                "no final seal: the stream was cut short, or its collector did not stop cleanly",
                Some((self.line_no, self.line_no, self.last_time_ns, 0)),
            );
        }
        Report {
            intact: self.findings.is_empty(),
            lines: self.line_no,
            batches_verified: self.verified,
            key: self.key.map(|k| hex::encode(k.as_bytes())),
            stream: self.stream.map(hex::encode),
            finished: self.finished,
            findings: self.findings,
        }
    }
}

/// A seal's hex fields as bytes.
struct Decoded {
    key: VerifyingKey,
    stream: [u8; 16],
    prev: [u8; 32],
    hash: [u8; 32],
    sig: Signature,
}

impl Decoded {
    fn of(s: &SealLine) -> Result<Decoded> {
        Ok(Decoded {
            key: parse_key(&s.key)?,
            stream: hex_array(&s.stream)?,
            prev: hex_array(&s.prev)?,
            hash: hex_array(&s.hash)?,
            sig: Signature::from_bytes(&hex_array::<64>(&s.sig)?),
        })
    }
}

/// Whether a line is a seal (cheap test; a damaged one fails its parse).
pub fn is_seal(line: &[u8]) -> bool {
    line.starts_with(b"{\"type\":\"seal\"")
}

fn parse_key(hex_key: &str) -> Result<VerifyingKey> {
    let bytes: [u8; 32] = hex_array(hex_key.trim())?;
    VerifyingKey::from_bytes(&bytes).context("not an Ed25519 public key")
}

fn hex_array<const N: usize>(s: &str) -> Result<[u8; N]> {
    let v = hex::decode(s).context("not hex")?;
    v.try_into()
        .map_err(|v: Vec<u8>| anyhow::anyhow!("{} bytes where {N} belong", v.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SealKey {
        SealKey {
            signing: SigningKey::from_bytes(&[7; 32]),
        }
    }

    /// Event-like lines, `n` of them, with times.
    fn lines(n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| {
                let pad = "x".repeat(i % 37 * 11);
                format!("{{\"type\":\"event\",\"id\":{i},\"cpu\":0,\"seq\":{i},\"time_ns\":{},\"comm\":\"{pad}\"}}\n", 1_000 + i).into_bytes()
            })
            .collect()
    }

    /// The sealed stream of `input`, handed to the sealer in pieces cut at
    /// `cut`-byte steps (the writer thread's chunks split lines anywhere).
    fn sealed(input: &[Vec<u8>], every: u64, cut: usize, finish: bool) -> Vec<u8> {
        let mut s = Sealer::new(key(), every, Duration::from_secs(3600)).unwrap();
        let all: Vec<u8> = input.concat();
        let mut out = Vec::new();
        for piece in all.chunks(cut) {
            s.write(piece, &mut out).unwrap();
        }
        if finish {
            s.finish(&mut out).unwrap();
        }
        out
    }

    fn verify(stream: &[u8], pinned: Option<&str>) -> Report {
        let mut v = Verifier::new(pinned).unwrap();
        for line in stream.split_inclusive(|b| *b == b'\n') {
            v.line(line);
        }
        v.finish()
    }

    fn kinds(r: &Report) -> Vec<(&'static str, Option<u64>)> {
        r.findings.iter().map(|f| (f.kind, f.batch)).collect()
    }

    /// The stream as batches, each its lines and then its seal.
    fn batches(stream: &[u8]) -> Vec<Vec<u8>> {
        let mut out = vec![Vec::new()];
        for line in stream.split_inclusive(|b| *b == b'\n') {
            out.last_mut().unwrap().extend_from_slice(line);
            if is_seal(line) {
                out.push(Vec::new());
            }
        }
        out.pop();
        out
    }

    /// A stream sealed by a key of its own (none pinned) numbers its
    /// batches and lines as it likes: numbers up to u64::MAX are reported,
    /// never wrapped. Before, the verifier panicked with overflow checks
    /// (`first_line + lines`, `batch + 1`), and without them listed every
    /// missing batch from 0 on: 2^64 findings.
    #[test]
    fn a_forged_numbering_up_to_u64_max_is_reported_not_wrapped() {
        let body: Vec<u8> = lines(2).concat();
        let mut batch = Batch::new();
        assert_eq!(batch.take_lines(&body, 3), body.len());
        // What BatchSealer::seal writes, at numbers its counters never reach.
        let f = Fields {
            stream: [9; 16],
            batch: u64::MAX,
            first_line: u64::MAX,
            lines: 2,
            first_time_ns: batch.first_time_ns,
            last_time_ns: batch.last_time_ns,
            last: true,
            prev: [0; 32],
        };
        let (seal, _) = f.seal_line(&batch.content_hash(), &key());
        let mut stream = body.clone();
        stream.extend(serde_json::to_vec(&seal).unwrap());
        stream.push(b'\n');
        let r = verify(&stream, None);
        assert_eq!(kinds(&r), [("deleted", Some(0))], "{r:?}");
        assert!(
            r.findings[0].message.contains(
                "batches 0 to 18446744073709551614 are missing (18446744073709551615 batches)"
            ),
            "{r:?}"
        );
        assert_eq!(r.batches_verified, 1);
        // A short gap is still one finding a batch.
        let genuine = sealed(&lines(9), 3, 50, true);
        let b = batches(&genuine);
        let r = verify(&[b[0].clone(), b[3].clone()].concat(), None);
        assert_eq!(
            kinds(&r),
            [("deleted", Some(1)), ("deleted", Some(2))],
            "{r:?}"
        );
    }

    #[test]
    fn a_stream_cut_anywhere_seals_the_same_and_verifies() {
        let input = lines(1000);
        for cut in [1, 7, 100, 4096, 1 << 20] {
            let out = sealed(&input, 64, cut, true);
            let r = verify(&out, None);
            assert!(r.intact, "cut {cut}: {:?}", r.findings);
            assert_eq!(r.lines, 1000);
            assert_eq!(r.batches_verified, 1000 / 64 + 1);
            // The data lines come through unchanged and in order.
            let data: Vec<u8> = out
                .split_inclusive(|b| *b == b'\n')
                .filter(|l| !is_seal(l))
                .flatten()
                .copied()
                .collect();
            assert_eq!(data, input.concat());
        }
        // Seals carry each batch's time range.
        let out = sealed(&input, 100, 333, true);
        let first: SealLine = serde_json::from_slice(
            out.split_inclusive(|b| *b == b'\n')
                .find(|l| is_seal(l))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            (
                first.first_line,
                first.lines,
                first.first_time_ns,
                first.last_time_ns
            ),
            (0, 100, 1_000, 1_099)
        );
    }

    #[test]
    fn every_kind_of_tampering_is_found_and_placed() {
        let out = sealed(&lines(500), 50, 4096, true);
        let b = batches(&out);
        assert_eq!(b.len(), 11); // ten of 50 lines and the final, empty one

        // One byte of one line flipped: its batch is altered.
        let mut flipped = out.clone();
        let at = b[..3].iter().map(Vec::len).sum::<usize>() + 30;
        flipped[at] ^= 1;
        let r = verify(&flipped, None);
        assert_eq!(kinds(&r), [("altered", Some(3))]);
        assert_eq!(
            (r.findings[0].first_line, r.findings[0].last_line),
            (Some(150), Some(199))
        );
        assert_eq!(
            (r.findings[0].first_time_ns, r.findings[0].last_time_ns),
            (Some(1_150), Some(1_199))
        );

        // One byte of a seal flipped: that seal no longer holds.
        let mut flipped = out.clone();
        let seal_at = b[..5].iter().map(Vec::len).sum::<usize>() - 20;
        flipped[seal_at] ^= 1;
        let r = verify(&flipped, None);
        assert!(!r.intact);
        assert_eq!(r.findings[0].kind, "forged-seal");

        // A batch dropped, lines and seal: deleted, with the times around it.
        let dropped: Vec<u8> = b
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 4)
            .flat_map(|(_, x)| x.clone())
            .collect();
        let r = verify(&dropped, None);
        assert_eq!(kinds(&r), [("deleted", Some(4))]);
        assert_eq!(
            (r.findings[0].first_time_ns, r.findings[0].last_time_ns),
            (Some(1_199), Some(1_250))
        );

        // Two batches swapped.
        let mut swapped = b.clone();
        swapped.swap(6, 7);
        let r = verify(&swapped.concat(), None);
        assert_eq!(kinds(&r), [("reordered", Some(6))]);

        // A batch played twice.
        let mut twice = b.clone();
        twice.insert(3, b[2].clone());
        assert_eq!(
            kinds(&verify(&twice.concat(), None)),
            [("replayed", Some(2))]
        );

        // A line slipped into a batch, or one taken out.
        let mut more = b.clone();
        more[1].splice(0..0, lines(1)[0].iter().copied());
        assert_eq!(kinds(&verify(&more.concat(), None)), [("altered", Some(1))]);
        let mut fewer = b.clone();
        let first_nl = fewer[8].iter().position(|c| *c == b'\n').unwrap();
        fewer[8].drain(..=first_nl);
        assert_eq!(
            kinds(&verify(&fewer.concat(), None)),
            [("altered", Some(8))]
        );

        // The tail cut off: in a line, at a line's end, or with its seals.
        let r = verify(
            &out[..b[..9].iter().map(Vec::len).sum::<usize>() + 100],
            None,
        );
        assert_eq!(
            kinds(&r),
            [
                ("truncated", None),
                ("unsealed-tail", Some(9)),
                ("truncated", Some(9))
            ]
        );
        let r = verify(&out[..b[..9].iter().map(Vec::len).sum::<usize>() - 5], None);
        assert_eq!(
            kinds(&r),
            [
                ("truncated", None),
                ("unsealed-tail", Some(8)),
                ("truncated", Some(8))
            ]
        );
        let r = verify(&b[..9].concat(), None);
        assert_eq!(kinds(&r), [("truncated", Some(9))]);
        assert_eq!(r.findings[0].first_time_ns, Some(1_449));

        // Lines appended after the final seal.
        let mut appended = out.clone();
        appended.extend_from_slice(&lines(3).concat());
        let r = verify(&appended, None);
        assert!(
            r.findings.iter().any(|f| f.kind == "inserted"),
            "{:?}",
            r.findings
        );

        // A batch sealed by another key (a forger's), or of another stream.
        let mut forger = Sealer::new(
            SealKey {
                signing: SigningKey::from_bytes(&[9; 32]),
            },
            50,
            Duration::from_secs(3600),
        )
        .unwrap();
        let mut forged = Vec::new();
        forger.write(&lines(50).concat(), &mut forged).unwrap();
        let mut with_forged = b.clone();
        with_forged.insert(5, forged);
        assert_eq!(
            kinds(&verify(&with_forged.concat(), None)),
            [("foreign-key", Some(0))]
        );
        let other = sealed(&lines(50), 50, 4096, false);
        let mut with_other = b.clone();
        with_other.insert(5, other);
        assert_eq!(
            kinds(&verify(&with_other.concat(), None)),
            [("other-stream", Some(0))]
        );

        // The key given must be the one that sealed.
        let right = key().public_hex();
        assert!(verify(&out, Some(&right)).intact);
        let wrong = SealKey {
            signing: SigningKey::from_bytes(&[9; 32]),
        }
        .public_hex();
        let r = verify(&out, Some(&wrong));
        assert!(r.findings.iter().all(|f| f.kind == "foreign-key") && !r.intact);

        // An unsealed stream says so.
        assert_eq!(
            kinds(&verify(&lines(10).concat(), None)),
            [("unsealed-tail", Some(0)), ("not-sealed", None)]
        );
    }

    #[test]
    fn a_quiet_stream_is_sealed_at_its_age_limit_on_whole_lines() {
        let mut s = Sealer::new(key(), 1000, Duration::ZERO).unwrap();
        let mut out = Vec::new();
        s.write(b"{\"a\":1}\n{\"a\"", &mut out).unwrap();
        s.tick(&mut out).unwrap(); // inside a line: no seal
        assert!(!out.split_inclusive(|b| *b == b'\n').any(is_seal));
        s.write(b":2}\n", &mut out).unwrap();
        s.tick(&mut out).unwrap();
        assert_eq!(
            out.split_inclusive(|b| *b == b'\n')
                .filter(|l| is_seal(l))
                .count(),
            1
        );
        s.finish(&mut out).unwrap();
        let r = verify(&out, None);
        assert!(r.intact, "{:?}", r.findings);
        assert_eq!((r.lines, r.batches_verified), (2, 2));
    }

    #[test]
    fn the_key_is_made_once_private_and_refused_when_others_can_read_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys/seal.key");
        let (k1, made) = SealKey::load_or_create(&path).unwrap();
        assert!(made);
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            std::fs::metadata(path.parent().unwrap())
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700
        );
        assert_eq!(
            std::fs::read_to_string(path.with_extension("pub"))
                .unwrap()
                .trim(),
            k1.public_hex()
        );
        let (k2, made) = SealKey::load_or_create(&path).unwrap();
        assert!(!made);
        assert_eq!(k1.public_hex(), k2.public_hex());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = SealKey::load_or_create(&path).err().unwrap().to_string();
        assert!(err.contains("can be read by others"), "{err}");
        std::fs::write(dir.path().join("short.key"), [1u8; 5]).unwrap();
        std::fs::set_permissions(
            dir.path().join("short.key"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        let err = SealKey::load_or_create(&dir.path().join("short.key"))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("5 bytes, not 32"), "{err}");
    }
}
