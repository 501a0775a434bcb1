//! Constants of src/bpf/intf.h and include/custos/provenance_features.h that
//! the consumer needs (the structs come from the skeleton's BTF types).
//! Every value here mirrors a #define/enum there; change both together.

pub const MAX_SYSCALLS: u32 = 512;
pub const HOOK_BPRM_CHECK: u16 = 1000;
pub const HOOK_FILE_OPEN: u16 = 1001;
pub const HOOK_FORK: u16 = 1002;
pub const HOOK_IO_URING: u16 = 1003;
pub const URING_MAX_OPS: u32 = 256;
pub const URING_EV_FIXED_FILE: u64 = 1;
pub const URING_EV_AT_SUBMIT: u64 = 2;
pub const URING_FILE: u16 = 1 << 0;
pub const URING_RW: u16 = 1 << 1;
pub const URING_WRITE: u16 = 1 << 2;
pub const URING_RET_FD: u16 = 1 << 3;
pub const URING_SOCK: u16 = 1 << 4;
pub const URING_CLOSE: u16 = 1 << 5;
pub const URING_OPEN: u16 = 1 << 6;
pub const URING_NO_PATHS: u16 = 1 << 7;
pub const ID_CPU_SHIFT: u32 = 48;

pub const ATTR_DATA_MAX: usize = 8192;
pub const PATH_CAP: usize = 1024;
pub const ARGV_CAP: usize = 4096;
pub const ARGV_MAX_ARGS: usize = 64;

pub const DROP_CRITICAL: usize = 0;
pub const DROP_EVENTS: usize = 1;
pub const DROP_ATTRS: usize = 2;

pub const SPEC_NO_EXIT: u16 = 1 << 0;
pub const SPEC_EXEC: u16 = 1 << 1;
pub const SPEC_FD_PATH: u16 = 1 << 2;
pub const SPEC_RET_FD_PATH: u16 = 1 << 3;
pub const SPEC_RW: u16 = 1 << 4;
pub const SPEC_ADDR_OUT: u16 = 1 << 5;
pub const SPEC_OPEN_HOW: u16 = 1 << 6;
pub const SPEC_PROT_EXEC: u16 = 1 << 7;
pub const SPEC_WRITE: u16 = 1 << 8;
pub const SPEC_PATH_RAW: u16 = 1 << 9;
pub const SPEC_LOCAL_ADDR: u16 = 1 << 10;
pub const SPEC_FILE_MAP: u16 = 1 << 11;
pub const SPEC_RET_FD_ID: u16 = 1 << 12;

pub const EV_CRITICAL: u16 = 1 << 0;
pub const EV_HAS_ATTRS: u16 = 1 << 1;
pub const EV_ATTRS_LOST: u16 = 1 << 2;
pub const EV_NO_RET: u16 = 1 << 3;
pub const EV_FIRST: u16 = 1 << 4;
pub const EV_HAS_FILE: u16 = 1 << 5;

pub const ATTR_PATH: u8 = 1;
pub const ATTR_PATH_BASE: u8 = 2;
pub const ATTR_PATH2: u8 = 3;
pub const ATTR_PATH2_BASE: u8 = 4;
pub const ATTR_FILE_PATH: u8 = 5;
pub const ATTR_ARGV: u8 = 6;
pub const ATTR_ADDR: u8 = 7;
pub const ATTR_ROOT: u8 = 8;
pub const ATTR_LADDR: u8 = 9;
pub const ATTR_TRUNCATED: u8 = 1;

/// include/custos/provenance_features.h
pub const PIN_DIR: &str = "/sys/fs/bpf/custos";
pub const TASK_FEATURES_MAP: &str = "task_features";
pub const GLOBAL_FEATURES_MAP: &str = "global_features";
pub const MAX_CONSUMERS: usize = 8;
pub const VERSION_LEN: usize = 32;
pub const RING_CRITICAL: usize = 0;
pub const RING_EVENTS: usize = 1;
pub const RING_ATTRS: usize = 2;
pub const NR_RINGS: usize = 3;
/// Copies of each syscall tracepoint program (SYSCALL_COPY in the BPF
/// program): a syscall is lost only when every copy was busy on its CPU.
pub const SYSCALL_COPIES: usize = 3;

#[cfg(test)]
mod tests {
    /// Every constant here has its twin `CUSTOS_<NAME>` in the C headers, with the same value.
    #[test]
    fn constants_agree_with_the_c_headers() {
        let c = [
            include_str!("bpf/intf.h"),
            include_str!("../../../include/custos/provenance_features.h"),
        ]
        .concat();
        let c_value = |name: &str| -> Option<String> {
            let want = format!("CUSTOS_{name}");
            c.lines().find_map(|l| {
                let l = l.trim().trim_end_matches(',');
                let l = l.split("/*").next().unwrap().trim().trim_end_matches(',');
                if let Some(rest) = l.strip_prefix("#define ") {
                    let (n, v) = rest.split_once(char::is_whitespace)?;
                    return (n == want).then(|| v.trim().to_string());
                }
                let (n, v) = l.split_once('=')?;
                (n.trim() == want).then(|| v.trim().to_string())
            })
        };
        let eval = |v: &str| -> String {
            let v = v.trim().trim_matches(|ch| ch == '(' || ch == ')');
            match v.split_once("<<") {
                Some((a, b)) => (a.trim().parse::<u64>().unwrap()
                    << b.trim().parse::<u64>().unwrap())
                .to_string(),
                None => v.trim_matches('"').to_string(),
            }
        };
        let mut checked = 0;
        for line in include_str!("intf.rs").lines() {
            let Some(rest) = line.strip_prefix("pub const ") else {
                continue;
            };
            let (name, rest) = rest.split_once(':').unwrap();
            let rust = eval(rest.split_once('=').unwrap().1.trim_end_matches(';'));
            let c = c_value(name).unwrap_or_else(|| panic!("no CUSTOS_{name} in the C headers"));
            assert_eq!(eval(&c), rust, "{name}");
            checked += 1;
        }
        assert!(checked > 40, "checked {checked}");
    }
}
