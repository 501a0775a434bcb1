//! The consumer's side of src/bpf/intf.h and of the
//! include/custos/provenance_features.h it includes: bindings generated from
//! the headers at build time (bindgen, build.rs), so each number and each
//! record layout is written once, in C.
//!
//! The structs keep their C names. The constants the consumer uses are
//! named here without their `CUSTOS_` prefix (the module is the prefix) and
//! given the type of the fields they go with; a value that does not fit
//! that type fails the build.

mod c {
    #![allow(
        non_upper_case_globals,
        non_camel_case_types,
        non_snake_case,
        dead_code
    )]
    include!(concat!(env!("OUT_DIR"), "/intf.rs"));
}

pub use c::{
    custos_attr_hdr, custos_cpu_state, custos_event, custos_global_features, custos_syscall_spec,
    custos_task_features, custos_uring_op,
};

const fn u8_of(v: u32) -> u8 {
    assert!(v <= u8::MAX as u32, "does not fit a u8");
    v as u8
}

const fn u16_of(v: u32) -> u16 {
    assert!(v <= u16::MAX as u32, "does not fit a u16");
    v as u16
}

/// A C string constant (`#define X "..."`) without its NUL.
const fn str_of(bytes: &'static [u8]) -> &'static str {
    let Some((&0, text)) = bytes.split_last() else {
        panic!("not NUL-terminated");
    };
    match std::str::from_utf8(text) {
        Ok(s) => s,
        Err(_) => panic!("not UTF-8"),
    }
}

pub const MAX_SYSCALLS: u32 = c::CUSTOS_MAX_SYSCALLS;
pub const HOOK_BPRM_CHECK: u16 = u16_of(c::CUSTOS_HOOK_BPRM_CHECK);
pub const HOOK_FILE_OPEN: u16 = u16_of(c::CUSTOS_HOOK_FILE_OPEN);
pub const HOOK_FORK: u16 = u16_of(c::CUSTOS_HOOK_FORK);
pub const HOOK_IO_URING: u16 = u16_of(c::CUSTOS_HOOK_IO_URING);
pub const URING_MAX_OPS: u32 = c::CUSTOS_URING_MAX_OPS;
pub const URING_EV_FIXED_FILE: u64 = c::CUSTOS_URING_EV_FIXED_FILE as u64;
pub const URING_EV_AT_SUBMIT: u64 = c::CUSTOS_URING_EV_AT_SUBMIT as u64;
pub const URING_FILE: u16 = u16_of(c::CUSTOS_URING_FILE);
pub const URING_RW: u16 = u16_of(c::CUSTOS_URING_RW);
pub const URING_WRITE: u16 = u16_of(c::CUSTOS_URING_WRITE);
pub const URING_RET_FD: u16 = u16_of(c::CUSTOS_URING_RET_FD);
pub const URING_SOCK: u16 = u16_of(c::CUSTOS_URING_SOCK);
pub const URING_CLOSE: u16 = u16_of(c::CUSTOS_URING_CLOSE);
pub const URING_OPEN: u16 = u16_of(c::CUSTOS_URING_OPEN);
pub const URING_NO_PATHS: u16 = u16_of(c::CUSTOS_URING_NO_PATHS);
pub const ID_CPU_SHIFT: u32 = c::CUSTOS_ID_CPU_SHIFT;

pub const ATTR_DATA_MAX: usize = c::CUSTOS_ATTR_DATA_MAX as usize;
pub const PATH_CAP: usize = c::CUSTOS_PATH_CAP as usize;
pub const ARGV_CAP: usize = c::CUSTOS_ARGV_CAP as usize;
pub const ARGV_MAX_ARGS: usize = c::CUSTOS_ARGV_MAX_ARGS as usize;

/// `enum custos_category`, the `category` of a `custos_syscall_spec`.
pub const CAT_PROCESS: u8 = u8_of(c::CUSTOS_CAT_PROCESS);
pub const CAT_FILE: u8 = u8_of(c::CUSTOS_CAT_FILE);
pub const CAT_NETWORK: u8 = u8_of(c::CUSTOS_CAT_NETWORK);
pub const CAT_CREDENTIAL: u8 = u8_of(c::CUSTOS_CAT_CREDENTIAL);
pub const CAT_MODULE: u8 = u8_of(c::CUSTOS_CAT_MODULE);
pub const CAT_MOUNT: u8 = u8_of(c::CUSTOS_CAT_MOUNT);
pub const CAT_MEMORY: u8 = u8_of(c::CUSTOS_CAT_MEMORY);
pub const CAT_IPC: u8 = u8_of(c::CUSTOS_CAT_IPC);

pub const DROP_CRITICAL: usize = c::CUSTOS_DROP_CRITICAL as usize;
pub const DROP_EVENTS: usize = c::CUSTOS_DROP_EVENTS as usize;
pub const DROP_ATTRS: usize = c::CUSTOS_DROP_ATTRS as usize;

pub const SPEC_NO_EXIT: u16 = u16_of(c::CUSTOS_SPEC_NO_EXIT);
pub const SPEC_EXEC: u16 = u16_of(c::CUSTOS_SPEC_EXEC);
pub const SPEC_FD_PATH: u16 = u16_of(c::CUSTOS_SPEC_FD_PATH);
pub const SPEC_RET_FD_PATH: u16 = u16_of(c::CUSTOS_SPEC_RET_FD_PATH);
pub const SPEC_RW: u16 = u16_of(c::CUSTOS_SPEC_RW);
pub const SPEC_ADDR_OUT: u16 = u16_of(c::CUSTOS_SPEC_ADDR_OUT);
pub const SPEC_OPEN_HOW: u16 = u16_of(c::CUSTOS_SPEC_OPEN_HOW);
pub const SPEC_PROT_EXEC: u16 = u16_of(c::CUSTOS_SPEC_PROT_EXEC);
pub const SPEC_WRITE: u16 = u16_of(c::CUSTOS_SPEC_WRITE);
pub const SPEC_PATH_RAW: u16 = u16_of(c::CUSTOS_SPEC_PATH_RAW);
pub const SPEC_LOCAL_ADDR: u16 = u16_of(c::CUSTOS_SPEC_LOCAL_ADDR);
pub const SPEC_FILE_MAP: u16 = u16_of(c::CUSTOS_SPEC_FILE_MAP);
pub const SPEC_RET_FD_ID: u16 = u16_of(c::CUSTOS_SPEC_RET_FD_ID);

pub const EV_CRITICAL: u16 = u16_of(c::CUSTOS_EV_CRITICAL);
pub const EV_HAS_ATTRS: u16 = u16_of(c::CUSTOS_EV_HAS_ATTRS);
pub const EV_ATTRS_LOST: u16 = u16_of(c::CUSTOS_EV_ATTRS_LOST);
pub const EV_NO_RET: u16 = u16_of(c::CUSTOS_EV_NO_RET);
pub const EV_FIRST: u16 = u16_of(c::CUSTOS_EV_FIRST);
pub const EV_HAS_FILE: u16 = u16_of(c::CUSTOS_EV_HAS_FILE);

pub const ATTR_PATH: u8 = u8_of(c::CUSTOS_ATTR_PATH);
pub const ATTR_PATH_BASE: u8 = u8_of(c::CUSTOS_ATTR_PATH_BASE);
pub const ATTR_PATH2: u8 = u8_of(c::CUSTOS_ATTR_PATH2);
pub const ATTR_PATH2_BASE: u8 = u8_of(c::CUSTOS_ATTR_PATH2_BASE);
pub const ATTR_FILE_PATH: u8 = u8_of(c::CUSTOS_ATTR_FILE_PATH);
pub const ATTR_ARGV: u8 = u8_of(c::CUSTOS_ATTR_ARGV);
pub const ATTR_ADDR: u8 = u8_of(c::CUSTOS_ATTR_ADDR);
pub const ATTR_ROOT: u8 = u8_of(c::CUSTOS_ATTR_ROOT);
pub const ATTR_LADDR: u8 = u8_of(c::CUSTOS_ATTR_LADDR);
pub const ATTR_TRUNCATED: u8 = u8_of(c::CUSTOS_ATTR_TRUNCATED);

// include/custos/provenance_features.h
pub const PIN_DIR: &str = str_of(c::CUSTOS_PIN_DIR);
pub const TASK_FEATURES_MAP: &str = str_of(c::CUSTOS_TASK_FEATURES_MAP);
pub const GLOBAL_FEATURES_MAP: &str = str_of(c::CUSTOS_GLOBAL_FEATURES_MAP);
pub const MAX_CONSUMERS: usize = c::CUSTOS_MAX_CONSUMERS as usize;
pub const VERSION_LEN: usize = c::CUSTOS_VERSION_LEN as usize;
pub const RING_CRITICAL: usize = c::CUSTOS_RING_CRITICAL as usize;
pub const RING_EVENTS: usize = c::CUSTOS_RING_EVENTS as usize;
pub const RING_ATTRS: usize = c::CUSTOS_RING_ATTRS as usize;
pub const NR_RINGS: usize = c::CUSTOS_NR_RINGS as usize;
/// Copies of each syscall tracepoint program (SYSCALL_COPY in the BPF
/// program): a syscall is lost only when every copy was busy on its CPU.
pub const SYSCALL_COPIES: usize = c::CUSTOS_SYSCALL_COPIES as usize;
