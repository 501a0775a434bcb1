//! A fast path for parsing the collector's lines: flat JSON objects whose
//! strings have no escapes. It fills the same `Line` as the serde parse and
//! gives up (returns `None`) on anything else — an escape, a float where an
//! integer belongs, a repeated key, a syntax error — so the serde parse
//! decides those lines, with its error messages. Accepting a line serde
//! rejects, or reading one differently, would be a bug: the tests compare
//! the two on every line of the synthetic and the recorded streams and on
//! every truncation of a sample.

use super::{Args, Lenient, Line, Str};
use std::borrow::Cow;

struct Cur<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
}

/// Nesting serde_json accepts (its recursion limit is 128); deeper gives up.
const MAX_DEPTH: u32 = 100;

impl<'a> Cur<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    fn lit(&mut self, word: &[u8]) -> Option<()> {
        self.ws();
        self.b
            .get(self.i..self.i + word.len())
            .filter(|w| *w == word)?;
        self.i += word.len();
        Some(())
    }

    /// `null` (then `None`) or whatever `f` reads.
    fn opt<T>(&mut self, f: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.peek()? == b'n' {
            self.lit(b"null")?;
            return Some(None);
        }
        f(self).map(Some)
    }

    /// A string without escapes or control characters, borrowed.
    fn str(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.i;
        // Eight bytes at a time: the first quote, backslash or control byte.
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        while let Some(chunk) = self.b.get(self.i..self.i + 8) {
            let w = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
            let (q, bs) = (w ^ (ONES * b'"' as u64), w ^ (ONES * b'\\' as u64));
            // A byte's high bit is set where it is zero (q, bs) or below 0x20 (w);
            // the lowest one found is exact (a borrow only runs upward).
            let hit = (q.wrapping_sub(ONES) & !q
                | bs.wrapping_sub(ONES) & !bs
                | w.wrapping_sub(ONES * 0x20) & !w)
                & HIGH;
            if hit != 0 {
                self.i += (hit.trailing_zeros() / 8) as usize;
                break;
            }
            self.i += 8;
        }
        loop {
            match *self.b.get(self.i)? {
                b'"' => break,
                b'\\' => return None,
                c if c < 0x20 => return None,
                _ => self.i += 1,
            }
        }
        let out = &self.s[start..self.i];
        self.i += 1;
        Some(out)
    }

    /// Digits of a JSON integer (no sign), refusing leading zeros, a
    /// fraction or an exponent (serde would not read those as integers).
    fn digits(&mut self) -> Option<u64> {
        let start = self.i;
        let mut v: u64 = 0;
        while let Some(c @ b'0'..=b'9') = self.b.get(self.i).copied() {
            v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
            self.i += 1;
        }
        let n = self.i - start;
        if n == 0 || (n > 1 && self.b[start] == b'0') {
            return None;
        }
        if let Some(b'.' | b'e' | b'E') = self.b.get(self.i) {
            return None;
        }
        Some(v)
    }

    fn u64(&mut self) -> Option<u64> {
        self.ws();
        self.digits()
    }

    fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.u64()?).ok()
    }

    fn i64(&mut self) -> Option<i64> {
        self.ws();
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
            let v = self.digits()?;
            // serde_json reads -0 as a float (not an integer): leave it to serde.
            // i64::MIN is the one magnitude past i64::MAX.
            return if v != 0 && v <= i64::MAX as u64 + 1 {
                Some((v as i64).wrapping_neg())
            } else {
                None
            };
        }
        i64::try_from(self.digits()?).ok()
    }

    fn i32(&mut self) -> Option<i32> {
        i32::try_from(self.i64()?).ok()
    }

    fn bool(&mut self) -> Option<bool> {
        match self.peek()? {
            b't' => self.lit(b"true").map(|_| true),
            b'f' => self.lit(b"false").map(|_| false),
            _ => None,
        }
    }

    /// Any JSON value, checked as strictly as serde checks it, and skipped.
    fn skip(&mut self, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.str().map(|_| ()),
            b'{' => {
                self.i += 1;
                if self.peek()? == b'}' {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    self.str()?;
                    self.eat(b':')?;
                    self.skip(depth + 1)?;
                    match self.peek()? {
                        b',' => self.i += 1,
                        b'}' => {
                            self.i += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            b'[' => {
                self.i += 1;
                if self.peek()? == b']' {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    self.skip(depth + 1)?;
                    match self.peek()? {
                        b',' => self.i += 1,
                        b']' => {
                            self.i += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            b't' => self.lit(b"true"),
            b'f' => self.lit(b"false"),
            b'n' => self.lit(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// A JSON number of any form: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
    fn number(&mut self) -> Option<()> {
        let b = self.b;
        let mut i = self.i;
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        let run = |mut i: usize| {
            let s = i;
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            (i, i - s)
        };
        match b.get(i)? {
            b'0' => i += 1,
            b'1'..=b'9' => i = run(i).0,
            _ => return None,
        }
        if b.get(i) == Some(&b'.') {
            let (j, n) = run(i + 1);
            if n == 0 {
                return None;
            }
            i = j;
        }
        if let Some(b'e' | b'E') = b.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = b.get(i) {
                i += 1;
            }
            let (j, n) = run(i);
            if n == 0 {
                return None;
            }
            i = j;
        }
        self.i = i;
        Some(())
    }

    /// `argv`: an array of strings.
    fn strings(&mut self) -> Option<Vec<String>> {
        self.eat(b'[')?;
        let mut v = Vec::new();
        if self.peek()? == b']' {
            self.i += 1;
            return Some(v);
        }
        loop {
            v.push(self.str()?.to_string());
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(v);
                }
                _ => return None,
            }
        }
    }

    /// `args`: the object's text, read by its own deserializer.
    fn args(&mut self) -> Option<Box<Args>> {
        if self.peek()? != b'{' {
            return None;
        }
        let start = self.i;
        self.skip(1)?;
        serde_json::from_str::<Args>(&self.s[start..self.i])
            .ok()
            .map(Box::new)
    }
}

/// Parses a line the serde way if it is simple enough; `None` otherwise.
pub(crate) fn fast_line(text: &str) -> Option<Line<'_>> {
    let mut c = Cur {
        s: text,
        b: text.as_bytes(),
        i: 0,
    };
    let mut l = Line::default();
    let mut seen: u64 = 0;
    c.eat(b'{')?;
    if c.peek()? == b'}' {
        c.i += 1;
    } else {
        loop {
            let key = c.str()?;
            c.eat(b':')?;
            let bit = match key {
                "type" => {
                    l.kind = c.opt(|c| c.str())?.map(|s| Str(Cow::Borrowed(s)));
                    0
                }
                "boot_id" => {
                    l.boot_id = c.opt(|c| c.str())?.map(|s| Str(Cow::Borrowed(s)));
                    1
                }
                "id" => {
                    l.id = c.opt(Cur::u64)?;
                    2
                }
                "cpu" => {
                    l.cpu = c.opt(Cur::u32)?;
                    3
                }
                "time_ns" => {
                    l.time_ns = c.opt(Cur::u64)?;
                    4
                }
                "pid" => {
                    l.pid = c.opt(Cur::u32)?;
                    5
                }
                "tid" => {
                    l.tid = c.opt(Cur::u32)?;
                    6
                }
                "ppid" => {
                    l.ppid = c.opt(Cur::u32)?;
                    7
                }
                "uid" => {
                    l.uid = c.opt(Cur::u32)?;
                    8
                }
                "euid" => {
                    l.euid = c.opt(Cur::u32)?;
                    9
                }
                "comm" => {
                    l.comm = c.opt(|c| c.str().map(str::to_string))?;
                    10
                }
                "syscall" => {
                    l.syscall = c.opt(|c| c.str())?.map(|s| Str(Cow::Borrowed(s)));
                    11
                }
                "ret" => {
                    l.ret = c.opt(Cur::i64)?;
                    12
                }
                "args" => {
                    l.args = c.opt(Cur::args)?;
                    13
                }
                "path" => {
                    l.path = c.opt(|c| c.str().map(str::to_string))?;
                    14
                }
                "path2" => {
                    l.path2 = c.opt(|c| c.str().map(str::to_string))?;
                    15
                }
                "argv" => {
                    l.argv = c.opt(Cur::strings)?;
                    16
                }
                "addr" => {
                    l.addr = c.opt(|c| c.str().map(str::to_string))?;
                    17
                }
                "fd" => {
                    l.fd = c.opt(Cur::i32)?;
                    18
                }
                "child_pid" => {
                    l.child_pid = c.opt(Cur::u32)?;
                    19
                }
                "count" => {
                    l.count = c.opt(Cur::u64)?;
                    20
                }
                "incomplete" => {
                    // As `Option<Lenient<bool>>` reads it: null is None,
                    // a boolean itself, any other value Some(None).
                    l.incomplete = match c.peek()? {
                        b'n' => {
                            c.lit(b"null")?;
                            None
                        }
                        b't' | b'f' => Some(Lenient(Some(c.bool()?))),
                        _ => {
                            c.skip(1)?;
                            Some(Lenient(None))
                        }
                    };
                    21
                }
                "dev" => {
                    l.dev = c.opt(Cur::u64)?;
                    22
                }
                "inode" => {
                    l.inode = c.opt(Cur::u64)?;
                    23
                }
                "first_seq" => {
                    l.first_seq = c.opt(Cur::u64)?;
                    24
                }
                "last_seq" => {
                    l.last_seq = c.opt(Cur::u64)?;
                    25
                }
                "category" => {
                    l.category = c.opt(|c| c.str())?.map(|s| Str(Cow::Borrowed(s)));
                    26
                }
                "upper_bound" => {
                    l.upper_bound = c.opt(Cur::bool)?;
                    27
                }
                "start_ns" => {
                    l.start_ns = c.opt(Cur::u64)?;
                    28
                }
                "end_ns" => {
                    l.end_ns = c.opt(Cur::u64)?;
                    29
                }
                "workflow" => {
                    l.workflow = c.opt(Cur::u64)?;
                    30
                }
                "workflow_parent" => {
                    l.workflow_parent = c.opt(Cur::u64)?;
                    31
                }
                "workflow_cause" => {
                    l.workflow_cause = c.opt(Cur::u64)?;
                    32
                }
                "workflow_running" => {
                    l.workflow_running = c.opt(Cur::bool)?;
                    33
                }
                "root_dev" => {
                    l.root_dev = c.opt(Cur::u64)?;
                    34
                }
                "root_inode" => {
                    l.root_inode = c.opt(Cur::u64)?;
                    35
                }
                "laddr" => {
                    l.laddr = c.opt(|c| c.str().map(str::to_string))?;
                    36
                }
                // A nested object the graph reads: serde parses those lines.
                "container" => return None,
                _ => {
                    c.skip(1)?;
                    63
                }
            };
            if bit != 63 {
                // serde refuses a repeated field.
                if seen & (1 << bit) != 0 {
                    return None;
                }
                seen |= 1 << bit;
            }
            match c.peek()? {
                b',' => c.i += 1,
                b'}' => {
                    c.i += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    c.ws();
    (c.i == c.b.len()).then_some(l)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    /// What serde reads, or None when it refuses the line.
    fn by_serde(l: &str) -> Option<String> {
        serde_json::from_str::<Line>(l)
            .ok()
            .map(|l| format!("{l:?}"))
    }

    /// The fast path may give up on any line, but what it reads is what
    /// serde reads, and it never accepts a line serde refuses.
    fn agrees(l: &str) -> bool {
        match fast_line(l) {
            Some(f) => {
                assert_eq!(
                    Some(format!("{f:?}")),
                    by_serde(l),
                    "fast path misread {l:?}"
                );
                true
            }
            None => false,
        }
    }

    fn recorded() -> Vec<String> {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/collector-gcc-build.jsonl.zst");
        crate::archive::open_input(&p)
            .unwrap()
            .lines()
            .map(Result::unwrap)
            .collect()
    }

    fn synthetic() -> Vec<String> {
        let mut out = Vec::new();
        crate::synth::generate(
            &crate::synth::SynthConfig::scaled(3, 0.002),
            &mut out,
            |_| {},
        )
        .unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn reads_every_collector_line_as_serde_does() {
        for (name, lines) in [("recorded", recorded()), ("synthetic", synthetic())] {
            let fast = lines.iter().filter(|l| agrees(l)).count();
            // The collector writes no escapes in most lines: nearly all take the fast path.
            assert!(
                fast * 100 >= lines.len() * 95,
                "{name}: {fast} of {} lines fast",
                lines.len()
            );
        }
    }

    #[test]
    fn never_accepts_what_serde_refuses_truncated_or_mutated() {
        let mut sample: Vec<String> = recorded().into_iter().step_by(97).collect();
        sample.extend(synthetic().into_iter().step_by(1009));
        sample.push(r#"{"type":"event","id":7,"time_ns":5,"pid":10,"syscall":"pipe2","args":{"fds":[3,4],"flags":524288},"incomplete":false,"x":[1.5e3,-0.25,{"y":null}]}"#.into());
        let subs: &[u8] = b"\"\\1.e-}],:{[ 0ntf";
        for l in &sample {
            for cut in 0..l.len() {
                if l.is_char_boundary(cut) {
                    agrees(&l[..cut]);
                }
            }
            for at in (0..l.len()).filter(|i| l.is_char_boundary(*i) && l.is_char_boundary(i + 1)) {
                for s in subs {
                    let mut m = l.as_bytes().to_vec();
                    m[at] = *s;
                    if let Ok(m) = String::from_utf8(m) {
                        agrees(&m);
                    }
                }
            }
        }
    }

    #[test]
    fn edge_cases_read_as_serde_reads_them_or_fall_back() {
        let ev = |rest: &str| {
            format!(r#"{{"type":"event","id":1,"time_ns":2,"pid":3,"syscall":"read"{rest}}}"#)
        };
        // Taken by the fast path (and equal to serde).
        for l in [
            ev(""),
            ev(r#","ret":-9223372036854775808,"fd":-1,"cpu":4294967295"#),
            ev(r#","ret":-1,"comm":null,"path":null,"argv":[],"args":{}"#),
            ev(r#","argv":["a","b c"],"args":{"fd":3,"fds":[1,2],"z":{"q":[true,false,null]}}"#),
            ev(r#","incomplete":true,"upper_bound":false,"extra":{"a":[1,2.5e-3,"s"]}"#),
            ev(r#","incomplete":7"#),
            ev(r#","incomplete":null"#),
            format!(" \t{} \n", ev(r#" , "tid" : 5 "#)),
        ] {
            assert!(agrees(&l), "{l}");
        }
        // Left to serde: escapes, repeated fields, non-integers where integers
        // belong, numbers serde refuses, trailing text.
        for l in [
            ev(r#","path":"/a\"b""#),
            r#"{"ty\u0070e":"event","id":1,"time_ns":2,"pid":3,"syscall":"read"}"#.to_string(),
            ev(r#","pid":4"#),
            ev(r#","fd":1.0"#),
            ev(r#","ret":-0"#),
            ev(r#","fd":1e2"#),
            ev(r#","fd":01"#),
            ev(r#","fd":2147483648"#),
            ev(r#","id":18446744073709551616"#),
            ev(r#","x":01"#),
            ev(r#","x":1."#),
            ev(r#","x":-"#),
            ev(r#","upper_bound":1"#),
            format!("{} x", ev("")),
            ev(r#","comm":"a	b""#),
        ] {
            assert!(fast_line(&l).is_none(), "{l}");
        }
    }
}
