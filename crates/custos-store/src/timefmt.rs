//! Nanosecond Unix times to and from RFC 3339 (UTC), without a date crate.

use anyhow::{bail, Context, Result};

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719468;
    let era = if z >= 0 { z } else { z - 146096 } / 146097;
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// `2026-11-21T10:15:04.123456789Z`. Digits written directly: an answer
/// formats one time per node, and `format!` was a seventh of the whole
/// answer's time. A u64 of nanoseconds ends in 2554, so the year has 4 digits.
pub fn format_ns(ns: u64) -> String {
    let secs = (ns / 1_000_000_000) as i64;
    let frac = ns % 1_000_000_000;
    let (y, m, d) = civil_from_days(secs.div_euclid(86400));
    let rem = secs.rem_euclid(86400);
    let mut b = *b"0000-00-00T00:00:00.000000000Z";
    let mut put = |at: usize, width: usize, mut v: u64| {
        for i in (at..at + width).rev() {
            b[i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, 4, y as u64);
    put(5, 2, m as u64);
    put(8, 2, d as u64);
    put(11, 2, (rem / 3600) as u64);
    put(14, 2, ((rem / 60) % 60) as u64);
    put(17, 2, (rem % 60) as u64);
    put(20, 9, frac);
    String::from_utf8(b.to_vec()).expect("ASCII digits")
}

/// The latest time the store holds: times are SQLite integers (i64
/// nanoseconds, record.rs), so 2262-04-11T23:47:16.854775807Z.
const LAST_STORED_NS: u64 = i64::MAX as u64;

/// Accepts nanoseconds since the epoch (`1763720104000000000`) or RFC 3339 in
/// UTC (`2026-11-21T10:15:04Z`, fractional seconds optional), up to the
/// store's last time: a later one is refused with the reason, not wrapped
/// into an earlier (or, as an i64, negative) bound.
pub fn parse_time(s: &str) -> Result<u64> {
    let s = s.trim();
    let past = |what: &dyn std::fmt::Display| {
        anyhow::anyhow!(
            "time {s:?}: {what} is past the store's range (at most {LAST_STORED_NS} ns, {})",
            format_ns(LAST_STORED_NS)
        )
    };
    if let Ok(ns) = s.parse::<u64>() {
        if ns > LAST_STORED_NS {
            return Err(past(&format_args!("{ns} ns")));
        }
        return Ok(ns);
    }
    let err = || {
        format!("time {s:?}: expected nanoseconds since the epoch or RFC 3339 UTC like 2026-11-21T10:15:04Z")
    };
    let b = s.as_bytes();
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || !(b[10] == b'T' || b[10] == b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        bail!(err());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64> {
        s.get(r)
            .and_then(|x| x.parse::<i64>().ok())
            .with_context(err)
    };
    let (y, mo, d, h, mi, se) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        bail!(err());
    }
    let mut rest = &s[19..];
    let mut frac_ns = 0u64;
    if let Some(r) = rest.strip_prefix('.') {
        let digits: String = r.chars().take_while(|c| c.is_ascii_digit()).collect();
        if digits.is_empty() || digits.len() > 9 {
            bail!(err());
        }
        frac_ns = format!("{digits:0<9}").parse().with_context(err)?;
        rest = &r[digits.len()..];
    }
    if !(rest.is_empty() || rest == "Z" || rest == "+00:00") {
        bail!("{}; only UTC (Z) is accepted", err());
    }
    // At most 4-digit years: the seconds fit an i64; their nanoseconds
    // may not (after 2262), so they are counted checked.
    let secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se;
    if secs < 0 {
        bail!(err());
    }
    (secs as u64)
        .checked_mul(1_000_000_000)
        .and_then(|ns| ns.checked_add(frac_ns))
        .filter(|ns| *ns <= LAST_STORED_NS)
        .ok_or_else(|| past(&"the date"))
}

#[cfg(test)]
mod tests {
    use super::*;
    /// The digit writer prints what `format!` printed, over the whole u64 range.
    #[test]
    fn format_ns_matches_format_macro() {
        let reference = |ns: u64| {
            let secs = (ns / 1_000_000_000) as i64;
            let (y, m, d) = civil_from_days(secs.div_euclid(86400));
            let rem = secs.rem_euclid(86400);
            format!(
                "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:09}Z",
                rem / 3600,
                (rem / 60) % 60,
                rem % 60,
                ns % 1_000_000_000
            )
        };
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for ns in [
            0,
            1,
            999_999_999,
            1_000_000_000,
            951_782_400_000_000_000,
            1_763_720_104_123_456_789,
            u64::MAX,
        ]
        .into_iter()
        .chain((0..2000).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        })) {
            assert_eq!(format_ns(ns), reference(ns), "{ns}");
        }
    }

    #[test]
    fn round_trip() {
        let ns = 1_763_720_104_123_456_789u64;
        let s = format_ns(ns);
        assert_eq!(s, "2025-11-21T10:15:04.123456789Z");
        assert_eq!(parse_time(&s).unwrap(), ns);
        assert_eq!(
            parse_time("2025-11-21T10:15:04Z").unwrap(),
            1_763_720_104_000_000_000
        );
        assert_eq!(parse_time("12345").unwrap(), 12345);
        assert!(parse_time("yesterday").is_err());
        assert!(parse_time("2025-11-21T10:15:04+02:00").is_err());
    }

    /// A time past the store's last one (i64 nanoseconds) is refused with
    /// the reason; before, a date after 2554 wrapped its u64 nanoseconds
    /// (an overflow panic with overflow checks) and a number past i64::MAX
    /// became a negative `--since`/`--until` bound.
    #[test]
    fn times_past_the_store_s_range_are_refused_not_wrapped() {
        let last = i64::MAX as u64;
        assert_eq!(parse_time(&last.to_string()).unwrap(), last);
        assert_eq!(parse_time(&format_ns(last)).unwrap(), last);
        assert_eq!(parse_time("2262-04-11T23:47:16.854775807Z").unwrap(), last);
        for t in [
            (last + 1).to_string(),
            u64::MAX.to_string(),
            "2262-04-11T23:47:16.854775808Z".into(),
            "2263-01-01T00:00:00Z".into(),
            // Its nanoseconds wrap a u64: it read as 1970-06-13T00:25:26Z.
            "2555-01-01T00:00:00Z".into(),
            "9999-12-31T23:59:60.999999999Z".into(),
        ] {
            let e = parse_time(&t).expect_err(&t).to_string();
            assert!(e.contains("past the store's range"), "{t}: {e}");
        }
    }
}
