//! Evasion (issue 30): what a process does without the usual syscalls is
//! in the graph. Each test runs an exfiltration under the real collector on
//! this machine's kernel (read a secret, send it to a loopback server, write
//! a copy) and asks the store for the secret's descendants: they must reach
//! the server's address and the copy, and the answer must be complete.
//! Needs root; run under the host collector's lock.
//!
//! `the_suite_passes_on_the_vm_kernel` runs the same tests again in the
//! sched_ext VM (`custos vm run`: Debian's 7.2 kernel, BPF-LSM on), with
//! the collector's BPF-LSM hooks required; alone:
//! `cargo test --release -p custos --test evasion -- --exact
//! the_suite_passes_on_the_vm_kernel` (under the VM's lock). The other
//! tests alone: `-- --skip the_suite_passes_on_the_vm_kernel` (under the
//! host collector's lock).

use std::io::Read;
use std::path::Path;
use std::process::Command;

/// The test harness's arguments that run only `workload_entry`, the
/// programs' entry point, in a child process.
const ENTRY_ARGS: [&str; 6] = [
    "--exact",
    "workload_entry",
    "--ignored",
    "--nocapture",
    "--test-threads",
    "1",
];

/// One collector per machine: the tests that start one take turns.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// 127.0.0.1:port, where the test's server listens.
fn loopback(port: u16) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// The workload's parameters, passed to the re-run test binary.
const WORKLOAD_ENV: &str = "CUSTOS_EVASION_WORKLOAD";

/// The exfiltration through io_uring alone: no open, read, socket, connect,
/// send or write syscall; only io_uring_setup, _enter and _register.
mod uring {
    use io_uring::{opcode, squeue, types, IoUring};
    use std::ffi::CString;
    use std::io;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    fn cstr(p: &Path) -> CString {
        CString::new(p.as_os_str().as_bytes()).unwrap()
    }

    /// One request, waited for; its result.
    fn run(ring: &mut IoUring, entry: squeue::Entry, what: &str) -> io::Result<i32> {
        // SAFETY: every buffer the entries point to outlives the wait below.
        unsafe { ring.submission().push(&entry) }.expect("room in the ring");
        ring.submit_and_wait(1)?;
        let cqe = ring.completion().next().expect("a completion");
        if cqe.result() < 0 {
            return Err(io::Error::other(format!(
                "{what}: {}",
                io::Error::from_raw_os_error(-cqe.result())
            )));
        }
        Ok(cqe.result())
    }

    /// Plain fds, one request at a time.
    pub fn plain(secret: &Path, copy: &Path, port: u16) -> io::Result<()> {
        let mut ring = IoUring::new(8)?;
        let at = types::Fd(libc::AT_FDCWD);
        let (secret, copy) = (cstr(secret), cstr(copy));
        let mut buf = vec![0u8; 65536];
        let fd = run(
            &mut ring,
            opcode::OpenAt::new(at, secret.as_ptr())
                .flags(libc::O_RDONLY)
                .build(),
            "open the secret",
        )?;
        let n = run(
            &mut ring,
            opcode::Read::new(types::Fd(fd), buf.as_mut_ptr(), buf.len() as u32).build(),
            "read",
        )?;
        let sock = run(
            &mut ring,
            opcode::Socket::new(libc::AF_INET, libc::SOCK_STREAM, 0).build(),
            "socket",
        )?;
        let addr = super::loopback(port);
        run(
            &mut ring,
            opcode::Connect::new(
                types::Fd(sock),
                (&addr as *const libc::sockaddr_in).cast(),
                std::mem::size_of_val(&addr) as u32,
            )
            .build(),
            "connect",
        )?;
        run(
            &mut ring,
            opcode::Send::new(types::Fd(sock), buf.as_ptr(), n as u32).build(),
            "send",
        )?;
        let out = run(
            &mut ring,
            opcode::OpenAt::new(at, copy.as_ptr())
                .flags(libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC)
                .mode(0o600)
                .build(),
            "open the copy",
        )?;
        run(
            &mut ring,
            opcode::Write::new(types::Fd(out), buf.as_ptr(), n as u32).build(),
            "write",
        )?;
        for f in [fd, sock, out] {
            run(&mut ring, opcode::Close::new(types::Fd(f)).build(), "close")?;
        }
        Ok(())
    }

    /// Registered files only (no fd is ever made), and the read, send and
    /// write linked in one submission; the write posts no completion when
    /// it succeeds (IOSQE_CQE_SKIP_SUCCESS), a nop linked after it does.
    pub fn registered_linked(secret: &Path, copy: &Path, port: u16) -> io::Result<()> {
        let len = std::fs::metadata(secret)?.len() as u32;
        let mut ring = IoUring::new(8)?;
        ring.submitter().register_files_sparse(4)?;
        let slot = |i| Some(types::DestinationSlot::try_from_slot_target(i).unwrap());
        let at = types::Fd(libc::AT_FDCWD);
        let (secret, copy) = (cstr(secret), cstr(copy));
        let mut buf = vec![0u8; len as usize];
        run(
            &mut ring,
            opcode::OpenAt::new(at, secret.as_ptr())
                .flags(libc::O_RDONLY)
                .file_index(slot(0))
                .build(),
            "open the secret",
        )?;
        run(
            &mut ring,
            opcode::OpenAt::new(at, copy.as_ptr())
                .flags(libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC)
                .mode(0o600)
                .file_index(slot(1))
                .build(),
            "open the copy",
        )?;
        run(
            &mut ring,
            opcode::Socket::new(libc::AF_INET, libc::SOCK_STREAM, 0)
                .file_index(slot(2))
                .build(),
            "socket",
        )?;
        let addr = super::loopback(port);
        run(
            &mut ring,
            opcode::Connect::new(
                types::Fixed(2),
                (&addr as *const libc::sockaddr_in).cast(),
                std::mem::size_of_val(&addr) as u32,
            )
            .build(),
            "connect",
        )?;
        let chain = [
            opcode::Read::new(types::Fixed(0), buf.as_mut_ptr(), len)
                .build()
                .flags(squeue::Flags::IO_LINK)
                .user_data(1),
            opcode::Send::new(types::Fixed(2), buf.as_ptr(), len)
                .build()
                .flags(squeue::Flags::IO_LINK)
                .user_data(2),
            opcode::Write::new(types::Fixed(1), buf.as_ptr(), len)
                .build()
                .flags(squeue::Flags::IO_LINK | squeue::Flags::SKIP_SUCCESS)
                .user_data(3),
            // Completes once the write has: the write itself says nothing.
            opcode::Nop::new().build().user_data(4),
        ];
        // SAFETY: buf outlives the wait below.
        unsafe { ring.submission().push_multiple(&chain) }.expect("room in the ring");
        ring.submit_and_wait(3)?;
        let results: Vec<(u64, i32)> = ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        if results != [(1, len as i32), (2, len as i32), (4, 0)] {
            return Err(io::Error::other(format!(
                "the linked read and send: {results:?}"
            )));
        }
        for i in 0..3 {
            run(
                &mut ring,
                opcode::Close::new(types::Fixed(i)).build(),
                "close",
            )?;
        }
        Ok(())
    }
}

/// The exfiltration with syscalls that move data without read, send or
/// write: sendfile, splice through a pipe, copy_file_range, and memory
/// mappings (a shared writable mapping writes the copy with no syscall).
mod plainfd {
    use std::ffi::CString;
    use std::io;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    fn check(what: &str, r: libc::c_long) -> io::Result<libc::c_long> {
        if r < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::other(format!("{what}: {e}")));
        }
        Ok(r)
    }

    fn open(p: &Path, flags: libc::c_int) -> io::Result<libc::c_int> {
        let c = CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: c is a valid C string for the call.
        let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, 0o600) };
        Ok(check("open", fd.into())? as libc::c_int)
    }

    /// A socket connected to 127.0.0.1:port.
    fn connect(port: u16) -> io::Result<libc::c_int> {
        let addr = super::loopback(port);
        // SAFETY: plain syscalls on a new fd and a valid sockaddr_in.
        unsafe {
            let s = check(
                "socket",
                libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0).into(),
            )? as libc::c_int;
            check(
                "connect",
                libc::connect(
                    s,
                    (&addr as *const libc::sockaddr_in).cast(),
                    std::mem::size_of_val(&addr) as u32,
                )
                .into(),
            )?;
            Ok(s)
        }
    }

    fn close(fd: libc::c_int) {
        // SAFETY: fd is ours.
        unsafe { libc::close(fd) };
    }

    fn len(p: &Path) -> io::Result<usize> {
        Ok(std::fs::metadata(p)?.len() as usize)
    }

    /// sendfile from the secret to the socket, copy_file_range to the copy.
    pub fn sendfile(secret: &Path, copy: &Path, port: u16) -> io::Result<()> {
        let n = len(secret)?;
        let src = open(secret, libc::O_RDONLY)?;
        let s = connect(port)?;
        let dst = open(copy, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC)?;
        // SAFETY: fds are ours; offsets are in-out pointers to locals.
        unsafe {
            let mut off: libc::off_t = 0;
            let sent = check(
                "sendfile",
                libc::sendfile(s, src, &mut off, n) as libc::c_long,
            )?;
            let (mut i, mut o): (libc::loff_t, libc::loff_t) = (0, 0);
            let copied = check(
                "copy_file_range",
                libc::copy_file_range(src, &mut i, dst, &mut o, n, 0) as libc::c_long,
            )?;
            if sent as usize != n || copied as usize != n {
                return Err(io::Error::other(format!(
                    "sent {sent}, copied {copied} of {n}"
                )));
            }
        }
        close(s);
        close(dst);
        close(src);
        Ok(())
    }

    /// splice: secret → pipe → socket, then secret → pipe → copy.
    pub fn splice(secret: &Path, copy: &Path, port: u16) -> io::Result<()> {
        let n = len(secret)?;
        let src = open(secret, libc::O_RDONLY)?;
        let s = connect(port)?;
        let dst = open(copy, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC)?;
        let mut p = [0 as libc::c_int; 2];
        // SAFETY: fds are ours; offsets are in-out pointers to locals.
        unsafe {
            check("pipe", libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC).into())?;
            for (to, what) in [(s, "the socket"), (dst, "the copy")] {
                let mut off: libc::loff_t = 0;
                let into = libc::splice(src, &mut off, p[1], std::ptr::null_mut(), n, 0);
                let out = libc::splice(p[0], std::ptr::null_mut(), to, std::ptr::null_mut(), n, 0);
                if into as usize != n || out as usize != n {
                    return Err(io::Error::other(format!(
                        "splice to {what}: {into} in, {out} out of {n}: {}",
                        io::Error::last_os_error()
                    )));
                }
            }
        }
        for fd in [p[0], p[1], s, dst, src] {
            close(fd);
        }
        Ok(())
    }

    /// The secret read through a private mapping, sent with send, the copy
    /// written through a shared writable mapping (no write syscall).
    pub fn mmap(secret: &Path, copy: &Path, port: u16) -> io::Result<()> {
        let n = len(secret)?;
        let src = open(secret, libc::O_RDONLY)?;
        let dst = open(copy, libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC)?;
        let s = connect(port)?;
        // SAFETY: mappings of n bytes of files at least n long; unmapped
        // before return.
        unsafe {
            check("ftruncate", libc::ftruncate(dst, n as libc::off_t).into())?;
            let r = libc::mmap(
                std::ptr::null_mut(),
                n,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                src,
                0,
            );
            let w = libc::mmap(
                std::ptr::null_mut(),
                n,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                dst,
                0,
            );
            if r == libc::MAP_FAILED || w == libc::MAP_FAILED {
                return Err(io::Error::other(format!(
                    "mmap: {}",
                    io::Error::last_os_error()
                )));
            }
            let sent = check("send", libc::send(s, r, n, 0) as libc::c_long)?;
            std::ptr::copy_nonoverlapping(r as *const u8, w as *mut u8, n);
            check("msync", libc::msync(w, n, libc::MS_SYNC).into())?;
            libc::munmap(r, n);
            libc::munmap(w, n);
            if sent as usize != n {
                return Err(io::Error::other(format!("sent {sent} of {n}")));
            }
        }
        for fd in [s, dst, src] {
            close(fd);
        }
        Ok(())
    }
}

/// The exfiltration through another process's memory: the parent reads
/// the secret and puts it into a forked child's memory, which sends it and
/// writes the copy. Nothing passes between them but the memory write: no
/// pipe, file or socket (the child polls its own buffer).
mod memory {
    use std::ffi::CString;
    use std::io;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    fn err(what: &str) -> io::Error {
        io::Error::other(format!("{what}: {}", io::Error::last_os_error()))
    }

    /// What the child does once the secret is in `buf` (`n` bytes, a flag
    /// byte after them): only syscalls, no allocation (it is a fork of a
    /// threaded process). 50 ms first, so its calls come well after the
    /// one that filled its memory.
    unsafe fn child(buf: *const u8, n: usize, copy: &CString, port: u16) -> ! {
        // SAFETY: (the whole body) the buffer is n + 1 bytes; plain syscalls.
        unsafe {
            while std::ptr::read_volatile(buf.add(n)) != 1 {
                libc::usleep(1000);
            }
            libc::usleep(50_000);
            let addr = super::loopback(port);
            let s = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
            let ok = s >= 0
                && libc::connect(
                    s,
                    (&addr as *const libc::sockaddr_in).cast(),
                    std::mem::size_of_val(&addr) as u32,
                ) == 0
                && libc::send(s, buf.cast(), n, 0) == n as isize;
            let fd = libc::open(
                copy.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
                0o600,
            );
            let ok = ok && fd >= 0 && libc::write(fd, buf.cast(), n) == n as isize;
            libc::close(s);
            libc::close(fd);
            libc::_exit(if ok { 0 } else { 1 })
        }
    }

    /// Waits for `pid` to end; an error unless it exited 0.
    fn reap(pid: libc::pid_t) -> io::Result<()> {
        let mut status = 0;
        // SAFETY: pid is our child.
        if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
            return Err(err("waitpid"));
        }
        if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            return Err(io::Error::other(format!(
                "the child failed: status {status:#x}"
            )));
        }
        Ok(())
    }

    /// process_vm_writev into the child's buffer (secret and flag at once).
    pub fn vm_writev(secret: &Path, copy: &Path, port: u16) -> io::Result<()> {
        let n = std::fs::metadata(secret)?.len() as usize;
        let buf = vec![0u8; n + 1];
        let copy = CString::new(copy.as_os_str().as_bytes()).unwrap();
        // SAFETY: the child only runs `child`, which never returns.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(err("fork"));
        }
        if pid == 0 {
            // SAFETY: buf is n + 1 bytes in the child's copy of our memory.
            unsafe { child(buf.as_ptr(), n, &copy, port) }
        }
        let mut data = std::fs::read(secret)?;
        data.push(1);
        let local = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: data.len(),
        };
        let remote = libc::iovec {
            iov_base: buf.as_ptr() as *mut _,
            iov_len: data.len(),
        };
        // SAFETY: both iovecs describe n + 1 bytes.
        let wrote = unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) };
        if wrote != data.len() as isize {
            // SAFETY: our child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            return Err(err("process_vm_writev"));
        }
        reap(pid)
    }

    /// PTRACE_POKEDATA, word by word, into a child that asked to be traced
    /// and stopped itself; PTRACE_CONT lets it go on.
    pub fn ptrace(secret: &Path, copy: &Path, port: u16) -> io::Result<()> {
        let n = std::fs::metadata(secret)?.len() as usize;
        let words = n / 8 + 1; // the flag byte in the last word
        let buf = vec![0u8; words * 8];
        let copy = CString::new(copy.as_os_str().as_bytes()).unwrap();
        // SAFETY: the child only stops itself and runs `child`.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(err("fork"));
        }
        if pid == 0 {
            // SAFETY: plain syscalls; buf is words * 8 >= n + 1 bytes.
            unsafe {
                libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0);
                libc::raise(libc::SIGSTOP);
                child(buf.as_ptr(), n, &copy, port)
            }
        }
        let mut status = 0;
        // SAFETY: our child, stopped by its SIGSTOP.
        if unsafe { libc::waitpid(pid, &mut status, 0) } != pid || !libc::WIFSTOPPED(status) {
            return Err(err("waitpid for the stopped child"));
        }
        let mut data = std::fs::read(secret)?;
        data.resize(words * 8, 0);
        data[n] = 1;
        for (i, w) in data.chunks_exact(8).enumerate() {
            let word = u64::from_ne_bytes(w.try_into().unwrap());
            // SAFETY: each address is a word of the child's buffer.
            let r = unsafe {
                libc::ptrace(
                    libc::PTRACE_POKEDATA,
                    pid,
                    buf.as_ptr().add(i * 8),
                    word as usize,
                )
            };
            if r < 0 {
                // SAFETY: our child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                return Err(err("PTRACE_POKEDATA"));
            }
        }
        // SAFETY: our stopped tracee.
        if unsafe { libc::ptrace(libc::PTRACE_CONT, pid, 0, 0) } < 0 {
            return Err(err("PTRACE_CONT"));
        }
        reap(pid)
    }
}

/// Fileless exec: the program that does the exfiltration never exists as
/// a file. A copy of this binary is written into a memfd and run from it
/// with fexecve (glibc: `execveat(fd, "", .., AT_EMPTY_PATH)`); the program
/// run from the memfd then reads the secret, sends it and writes the copy.
mod fileless {
    use std::ffi::CString;
    use std::io::{self, Write};
    use std::os::fd::FromRawFd;
    use std::path::Path;

    /// The memfd's name, as passed to memfd_create.
    pub const NAME: &str = "payload";

    /// Loads this binary into a memfd and runs it there as the
    /// `memfd_payload` workload; returns only if the exec failed.
    pub fn exec(secret: &Path, copy: &Path, port: u16) -> io::Result<()> {
        let image = std::fs::read(std::env::current_exe()?)?;
        let name = CString::new(NAME).unwrap();
        // SAFETY: a valid C string; the fd is checked before use.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::other(format!(
                "memfd_create: {}",
                io::Error::last_os_error()
            )));
        }
        // SAFETY: a new fd, owned by this File (an exec replaces us anyway).
        let mut memfd = unsafe { std::fs::File::from_raw_fd(fd) };
        memfd.write_all(&image)?;
        let args = [&[NAME][..], &super::ENTRY_ARGS[..]].concat();
        let env = format!(
            "{}=memfd_payload\n{}\n{}\n{port}",
            super::WORKLOAD_ENV,
            secret.display(),
            copy.display()
        );
        let args: Vec<CString> = args.iter().map(|a| CString::new(*a).unwrap()).collect();
        let env = [CString::new(env).unwrap()];
        let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        let envp = [env[0].as_ptr(), std::ptr::null()];
        // SAFETY: NULL-terminated arrays of valid C strings that outlive the call.
        unsafe { libc::fexecve(fd, argv.as_ptr(), envp.as_ptr()) };
        Err(io::Error::other(format!(
            "fexecve: {}",
            io::Error::last_os_error()
        )))
    }

    /// What the program run from the memfd does: plain syscalls.
    pub fn payload(secret: &Path, copy: &Path, port: u16) -> io::Result<()> {
        let data = std::fs::read(secret)?;
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
        s.write_all(&data)?;
        drop(s);
        std::fs::write(copy, &data)
    }
}

/// The workload, when the test binary is run again under the collector
/// (see `exfiltrate`); ignored in a normal run.
#[test]
#[ignore = "the workload the evasion tests run under the collector"]
fn workload_entry() {
    let Ok(spec) = std::env::var(WORKLOAD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split('\n').collect();
    let [variant, secret, copy, port] = parts[..] else {
        panic!("{WORKLOAD_ENV}: {spec:?}");
    };
    let (secret, copy, port) = (Path::new(secret), Path::new(copy), port.parse().unwrap());
    match variant {
        "uring_plain" => uring::plain(secret, copy, port),
        "uring_registered_linked" => uring::registered_linked(secret, copy, port),
        "sendfile" => plainfd::sendfile(secret, copy, port),
        "splice" => plainfd::splice(secret, copy, port),
        "mmap" => plainfd::mmap(secret, copy, port),
        "process_vm_writev" => memory::vm_writev(secret, copy, port),
        "ptrace" => memory::ptrace(secret, copy, port),
        "memfd_exec" => fileless::exec(secret, copy, port),
        "memfd_payload" => fileless::payload(secret, copy, port),
        _ => panic!("unknown workload {variant}"),
    }
    .unwrap();
}

/// What a run left: the stream's events and the secret's descendants.
struct Run {
    events: Vec<serde_json::Value>,
    descendants: serde_json::Value,
    secret: String,
    copy: String,
    endpoint: String,
    received: Vec<u8>,
    sent: Vec<u8>,
    db: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

/// `--lsm` for the collector: `auto` (the default) uses the BPF-LSM hooks
/// where the kernel allows them (not on the 6.18 host); the VM run asks
/// `require`, so that its result is BPF-LSM's and cannot silently not be.
const LSM_ENV: &str = "CUSTOS_EVASION_LSM";

/// A directory to keep each run's stream in (`VARIANT.jsonl`): what the
/// VM run leaves for the host to read, and for a person comparing kernels.
const KEEP_ENV: &str = "CUSTOS_EVASION_KEEP";

/// The collector must run its BPF-LSM hooks (the VM run): the tests then
/// also check what the hooks saw.
fn lsm_required() -> bool {
    lsm_mode() == "require"
}

fn lsm_mode() -> String {
    let mode = std::env::var(LSM_ENV).unwrap_or_else(|_| "auto".into());
    assert!(
        ["auto", "off", "require"].contains(&mode.as_str()),
        "{LSM_ENV}={mode:?}: not auto, off or require"
    );
    mode
}

/// `custos query --json WHAT TARGET` on the store at `db`.
fn query(db: &Path, what: &str, target: &str) -> serde_json::Value {
    let q = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args([
            "query",
            "--db",
            db.to_str().unwrap(),
            "--json",
            what,
            target,
        ])
        .output()
        .unwrap();
    assert!(q.status.success(), "{}", text(&q.stderr));
    serde_json::from_slice(&q.stdout).unwrap()
}

/// Runs `variant` under `custos collect --db`, a loopback server in this
/// process receiving what it sends, and asks the store for the
/// descendants of the secret.
fn exfiltrate(variant: &str) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let secret = d.join("secret.bin");
    let copy = d.join("copy.bin");
    let sent: Vec<u8> = (0..2000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&secret, &sent).unwrap();
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    let receiver = std::thread::spawn(move || {
        let (mut conn, _) = server.accept().unwrap();
        let mut got = Vec::new();
        conn.read_to_end(&mut got).unwrap();
        got
    });
    let out = d.join("events.jsonl");
    let db = d.join("store.db");
    let run = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args([
            "collect",
            "--no-seal",
            "--stats-interval",
            "0",
            "--lsm",
            &lsm_mode(),
            "-o",
            out.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
            "--",
        ])
        .arg(std::env::current_exe().unwrap())
        .args(ENTRY_ARGS)
        .env(
            WORKLOAD_ENV,
            format!(
                "{variant}\n{}\n{}\n{port}",
                secret.display(),
                copy.display()
            ),
        )
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{variant}: {}\n{}",
        text(&run.stdout),
        text(&run.stderr)
    );
    let received = receiver.join().unwrap();
    if let Ok(keep) = std::env::var(KEEP_ENV) {
        let to = Path::new(&keep).join(format!("{variant}.jsonl"));
        std::fs::copy(&out, &to).unwrap_or_else(|e| panic!("{KEEP_ENV}: {}: {e}", to.display()));
    }
    let events = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .collect();
    Run {
        events,
        descendants: query(&db, "descendants", secret.to_str().unwrap()),
        secret: secret.display().to_string(),
        copy: copy.display().to_string(),
        endpoint: format!("127.0.0.1:{port}"),
        received,
        sent,
        db,
        _dir: dir,
    }
}

impl Run {
    /// The io_uring events of the workload (a `via` the syscalls lack).
    fn uring_events(&self) -> Vec<&serde_json::Value> {
        self.events
            .iter()
            .filter(|e| e["type"] == "event" && e["via"] == "io_uring")
            .collect()
    }

    /// The workload's event of `syscall` (a syscall, not an io_uring request).
    fn event(&self, syscall: &str) -> &serde_json::Value {
        self.events
            .iter()
            .find(|e| e["type"] == "event" && e["syscall"] == syscall && e["via"].is_null())
            .unwrap_or_else(|| panic!("no {syscall} event in the stream"))
    }

    /// The io_uring event of `syscall` whose `key` is `value`.
    fn uring_event(&self, syscall: &str, key: &str, value: &str) -> &serde_json::Value {
        self.uring_events()
            .into_iter()
            .find(|e| e["syscall"] == syscall && e[key] == value)
            .unwrap_or_else(|| {
                panic!(
                    "no io_uring {syscall} with {key} {value} in {:#?}",
                    self.uring_events()
                )
            })
    }

    /// The secret's descendants reach the server's address and the copy,
    /// and the answer is complete; the account balanced.
    fn assert_found(&self) {
        assert_eq!(self.received, self.sent, "the server got the secret");
        assert_eq!(std::fs::read(&self.copy).unwrap(), self.sent, "the copy");
        let names: Vec<&str> = self.descendants["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["name"].as_str().unwrap_or(""))
            .collect();
        assert!(
            names.contains(&self.copy.as_str()),
            "descendants of the secret lack the copy: {names:?}"
        );
        assert!(
            names.contains(&self.endpoint.as_str()),
            "descendants of the secret lack {}: {names:?}",
            self.endpoint
        );
        assert_eq!(
            self.descendants["complete"], true,
            "{}",
            self.descendants["losses"]
        );
        let last = self
            .events
            .iter()
            .rev()
            .find(|l| l["type"] == "stats")
            .unwrap();
        assert_eq!(last["final"], true);
        assert_eq!(last["invariant_holds"], true, "{last}");
    }

    /// The io_uring requests' actor is the submitter, never an io_uring
    /// worker thread.
    fn assert_submitter_acts(&self) {
        let uring = self.uring_events();
        assert!(!uring.is_empty());
        let pid = uring[0]["pid"].clone();
        for e in &uring {
            assert_eq!(e["pid"], pid, "{e}");
            let comm = e["comm"].as_str().unwrap();
            assert!(!comm.starts_with("iou-"), "{e}");
        }
        if lsm_required() {
            self.assert_lsm_saw_the_opens(&pid);
        }
    }

    /// With BPF-LSM (the VM's kernel): `lsm:file_open` sees io_uring's
    /// opens of the secret and of the copy (an open for writing: critical),
    /// in the submitter's process, though the thread may be an `iou-wrk`
    /// worker the kernel handed a blocking open to. Nothing else of the
    /// requests reaches a hook: the io_uring events are the whole record.
    fn assert_lsm_saw_the_opens(&self, pid: &serde_json::Value) {
        for (path, critical) in [(&self.secret, false), (&self.copy, true)] {
            let open = self
                .events
                .iter()
                .find(|e| e["syscall"] == "lsm:file_open" && e["path"] == path.as_str())
                .unwrap_or_else(|| panic!("no lsm:file_open of {path}"));
            assert_eq!(open["pid"], *pid, "{open}");
            assert_eq!(open["critical"], critical, "{open}");
        }
    }
}

/// `exfiltrate(variant)`, one collector at a time, and `assert_found`.
fn found(variant: &str) -> Run {
    let r = {
        let _g = serial();
        exfiltrate(variant)
    };
    r.assert_found();
    r
}

#[test]
fn an_io_uring_exfiltration_is_found_step_by_step() {
    let r = found("uring_plain");
    r.assert_submitter_acts();
    // Each step is its syscall twin, with the twin's fields.
    let open = r.uring_event("openat", "path", &r.secret);
    assert!(open["fd"].as_i64().unwrap() >= 0, "{open}");
    let read = r.uring_event("read", "path", &r.secret);
    assert_eq!(read["ret"], 2000, "{read}");
    assert_eq!(read["io_uring_op"], "read");
    let send = r.uring_event("sendto", "addr", &r.endpoint);
    assert_eq!(send["ret"], 2000, "{send}");
    r.uring_event("connect", "addr", &r.endpoint);
    let copy = r.uring_event("openat", "path", &r.copy);
    assert_eq!(copy["critical"], true, "an open for writing: {copy}");
    let write = r.uring_event("write", "path", &r.copy);
    assert_eq!(write["ret"], 2000, "{write}");
}

#[test]
fn registered_files_and_linked_requests_still_name_their_files() {
    let r = found("uring_registered_linked");
    r.assert_submitter_acts();
    let read = r.uring_event("read", "path", &r.secret);
    assert_eq!(read["registered_file"], true, "{read}");
    assert_eq!(read["ret"], 2000, "{read}");
    let send = r.uring_event("sendto", "addr", &r.endpoint);
    assert_eq!(send["registered_file"], true, "{send}");
    // Its success posts no completion: recorded as it was submitted.
    let write = r.uring_event("write", "path", &r.copy);
    assert_eq!(write["registered_file"], true, "{write}");
    assert_eq!(write["at_submit"], true, "{write}");
    assert!(write.get("ret").is_none(), "{write}");
}

#[test]
fn sendfile_and_copy_file_range_carry_the_secret() {
    let r = found("sendfile");
    assert_eq!(r.event("sendfile")["ret"], 2000);
    assert_eq!(r.event("copy_file_range")["ret"], 2000);
}

#[test]
fn splice_through_a_pipe_carries_the_secret() {
    let r = found("splice");
    assert_eq!(r.event("splice")["ret"], 2000);
}

/// The copy is written through a shared writable mapping: no write
/// syscall; the mapping itself is the write (recorded when it is made).
#[test]
fn a_shared_writable_mapping_carries_the_secret() {
    let r = found("mmap");
    assert!(
        !r.events
            .iter()
            .any(|e| e["syscall"] == "write" && e["path"] == r.copy.as_str()),
        "the copy was written by a write syscall, not the mapping"
    );
}

/// The secret reaches the child only through process_vm_writev: the child
/// is informed by the writer's version that read it.
#[test]
fn process_vm_writev_into_another_process_carries_the_secret() {
    let r = found("process_vm_writev");
    let w = r.event("process_vm_writev");
    assert_eq!(w["ret"], 2001, "{w}");
    assert_eq!(w["critical"], true, "{w}");
}

/// The secret reaches a traced child only through PTRACE_POKEDATA.
#[test]
fn ptrace_pokes_into_a_tracee_carry_the_secret() {
    let r = found("ptrace");
    assert_eq!(r.event("ptrace")["critical"], true);
}

/// Fileless exec: the secret's descendants are found through the program
/// run from a memfd, and the graph says where that program came from: the
/// process that fexecve started used the memfd (named by its name and
/// inode, not by a path it never had), which the process that made it wrote.
#[test]
fn a_program_run_from_a_memfd_is_found_with_its_origin() {
    const AT_EMPTY_PATH: i64 = 0x1000;
    let r = found("memfd_exec");
    let memfd = format!("memfd:{}", fileless::NAME);
    let create = r.event("memfd_create");
    assert_eq!(create["path"], memfd.as_str(), "{create}");
    let exec = r.event("execveat");
    assert_eq!(exec["ret"], 0, "{exec}");
    assert_eq!(exec["args"]["dirfd"], create["fd"], "{exec}");
    assert_ne!(exec["args"]["flags"].as_i64().unwrap() & AT_EMPTY_PATH, 0);
    assert_eq!(exec["path"], memfd.as_str(), "{exec}");
    assert_eq!(
        exec["inode"], create["inode"],
        "the memfd itself ran: {exec}"
    );
    if lsm_required() {
        // The hook names the program as the exec does, by its inode: a
        // memfd's path walk ends at its file system's root ("/" until
        // the hook carried the inode, on the VM's kernel).
        let check = r
            .events
            .iter()
            .find(|e| e["syscall"] == "lsm:bprm_check_security" && e["argv"][0] == fileless::NAME)
            .expect("no lsm:bprm_check_security of the memfd's program");
        assert_eq!(check["path"], memfd.as_str(), "{check}");
        assert_eq!(
            (&check["dev"], &check["inode"]),
            (&create["dev"], &create["inode"]),
            "{check}"
        );
    }
    // Where the copy came from reaches back to the memfd and its maker.
    let a = query(&r.db, "ancestors", &r.copy);
    assert_eq!(a["complete"], true, "{}", a["losses"]);
    let nodes = a["nodes"].as_array().unwrap();
    let named = |id: &serde_json::Value| {
        nodes
            .iter()
            .find(|n| n["node"] == *id)
            .map(|n| (n["kind"].as_str().unwrap(), n["name"].as_str().unwrap()))
            .unwrap()
    };
    let memfd_name = format!("{memfd}:[{}:{}]", exec["dev"], exec["inode"]);
    let edges = a["edges"].as_array().unwrap();
    let ran = edges.iter().find(|e| {
        e["kind"] == "used"
            && named(&e["cause"]) == ("file", memfd_name.as_str())
            && named(&e["effect"]) == ("process", memfd.as_str())
    });
    assert!(
        ran.is_some(),
        "no process used {memfd_name} in the copy's ancestors: {a:#}"
    );
    let made = edges.iter().any(|e| {
        e["kind"] == "wasGeneratedBy"
            && named(&e["effect"]) == ("file", memfd_name.as_str())
            && named(&e["cause"]).0 == "process"
    });
    assert!(made, "nothing wrote {memfd_name}: {a:#}");
}

/// The tests above, each of which must pass in the VM.
const SUITE: [&str; 8] = [
    "a_program_run_from_a_memfd_is_found_with_its_origin",
    "a_shared_writable_mapping_carries_the_secret",
    "an_io_uring_exfiltration_is_found_step_by_step",
    "process_vm_writev_into_another_process_carries_the_secret",
    "ptrace_pokes_into_a_tracee_carry_the_secret",
    "registered_files_and_linked_requests_still_name_their_files",
    "sendfile_and_copy_file_range_carry_the_secret",
    "splice_through_a_pipe_carries_the_secret",
];

/// The whole suite on the VM's kernel (issue 30 asks for the io_uring
/// exfiltrations there): this test binary, run in the sched_ext VM, the
/// host root shared read-only (the guest's /tmp is its own, where the
/// tests make their files), with `--lsm require` for every collector, so
/// that the hooks' view is checked too and a kernel without BPF-LSM fails
/// rather than pass as the host does. One boot, about 2.5 minutes on the
/// emulator (2026-11-28).
#[test]
fn the_suite_passes_on_the_vm_kernel() {
    const SELF: &str = "the_suite_passes_on_the_vm_kernel";
    if std::env::var_os("CUSTOS_IN_VM").is_some() {
        return; // the run inside the guest: the tests above are the point
    }
    let run = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(["vm", "run", "-q", "--timeout", "1200"])
        .args(["--env", "CUSTOS_IN_VM=1"])
        .args(["--env", &format!("{LSM_ENV}=require")])
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args(["--test-threads", "1", "--skip", SELF])
        .output()
        .expect("run custos vm");
    let (stdout, stderr) = (text(&run.stdout), text(&run.stderr));
    assert_eq!(
        run.status.code(),
        Some(0),
        "the suite failed in the VM\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    for t in SUITE {
        assert!(
            stdout.lines().any(|l| l == format!("test {t} ... ok")),
            "{t} did not pass in the VM:\n{stdout}"
        );
    }
    // And nothing else ran or failed there (a new test belongs in SUITE).
    let summary = format!("test result: ok. {} passed; 0 failed", SUITE.len());
    assert!(stdout.contains(&summary), "not {summary:?}:\n{stdout}");
    eprintln!("{stdout}");
}
