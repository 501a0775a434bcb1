//! Which container an event's process runs in (docs/containers.md).
//!
//! Every record carries its task's cgroup id (the cgroup v2 directory's
//! inode). A container runtime puts each container in a cgroup of its own
//! whose name holds the container's id (`libpod-<id>`, `docker-<id>.scope`,
//! `cri-containerd-<id>.scope`, `crio-<id>.scope`, `/docker/<id>`): the
//! consumer turns a new cgroup id into its path once (`open_by_handle_at` on
//! the cgroup2 mount, the kernel's own id-to-directory lookup), reads the
//! container id from it, and asks the runtime for the rest (name, image,
//! Kubernetes labels) once per container, in a thread of its own: an event is
//! never held back for it. Until the runtime has answered, a container's
//! events carry its id and runtime only; the store joins them to the name
//! and image by id.
//!
//! The runtimes are also watched, through what they all do to start a
//! container: make its cgroup. A thread watches the cgroup tree (inotify),
//! asks about a container as soon as its cgroup appears, and forgets it
//! when the cgroup is removed: what is kept is bounded by the live
//! containers, not by every container the host ever ran.
//!
//! Per event this costs one hash lookup by cgroup id; host processes (no
//! container cgroup) cache a negative answer.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};

/// The runtimes whose cgroup names Custos reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Runtime {
    Podman,
    Docker,
    Containerd,
    CriO,
}

impl Runtime {
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Podman => "podman",
            Runtime::Docker => "docker",
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
        }
    }
}

/// The container a cgroup path names, if it names one: its runtime and id.
pub fn container_of_cgroup(path: &str) -> Option<(Runtime, String)> {
    // The innermost component that names a container: podman also nests a
    // `container` cgroup inside the container's own.
    for part in path.rsplit('/') {
        let part = part.strip_suffix(".scope").unwrap_or(part);
        let found = if let Some(id) = part.strip_prefix("libpod-") {
            // `libpod-conmon-<id>` is the monitor, not the container.
            (!id.starts_with("conmon-")).then_some((Runtime::Podman, id))
        } else if let Some(id) = part.strip_prefix("docker-") {
            Some((Runtime::Docker, id))
        } else if let Some(id) = part.strip_prefix("cri-containerd-") {
            Some((Runtime::Containerd, id))
        } else if let Some(id) = part.strip_prefix("crio-") {
            (!id.starts_with("conmon-")).then_some((Runtime::CriO, id))
        } else if is_container_id(part) {
            // cgroupfs layouts: /docker/<id>, /kubepods/.../pod<uid>/<id>.
            let parent = path
                .rsplit('/')
                .skip_while(|p| *p != part)
                .nth(1)
                .unwrap_or("");
            if parent == "docker" {
                Some((Runtime::Docker, part))
            } else if parent.starts_with("pod") {
                Some((Runtime::Containerd, part))
            } else {
                None
            }
        } else {
            None
        };
        if let Some((rt, id)) = found.filter(|(_, id)| is_container_id(id)) {
            return Some((rt, id.to_string()));
        }
    }
    None
}

fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// What the runtime says of a container.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Meta {
    pub name: Option<String>,
    pub image: Option<String>,
    /// Kubernetes labels of a CRI container, when present.
    pub pod: Option<String>,
    pub namespace: Option<String>,
    pub container_name: Option<String>,
}

impl Meta {
    /// With a CRI container's Kubernetes labels from `labels` (a runtime's
    /// labels or an OCI config's annotations: the same keys), when present.
    fn with_k8s_labels(self, labels: &serde_json::Value) -> Meta {
        Meta {
            pod: text(&labels["io.kubernetes.pod.name"]),
            namespace: text(&labels["io.kubernetes.pod.namespace"]),
            container_name: text(&labels["io.kubernetes.container.name"]),
            ..self
        }
    }
}

/// A JSON string that says something (not empty, not another type).
fn text(v: &serde_json::Value) -> Option<String> {
    v.as_str().filter(|s| !s.is_empty()).map(str::to_string)
}

/// Reads a container's metadata from its runtime's `inspect` JSON.
pub fn parse_inspect(rt: Runtime, json: &str) -> Option<Meta> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    match rt {
        Runtime::Podman | Runtime::Docker => {
            let c = v.get(0).unwrap_or(&v);
            let meta = Meta {
                name: text(&c["Name"]).map(|n| n.trim_start_matches('/').to_string()),
                image: text(&c["ImageName"]).or_else(|| text(&c["Config"]["Image"])),
                ..Meta::default()
            };
            Some(meta.with_k8s_labels(&c["Config"]["Labels"]))
        }
        Runtime::Containerd | Runtime::CriO => {
            // `crictl inspect`: {"status": {"metadata": {"name"}, "image": {"image"}, "labels": {...}}}
            let st = &v["status"];
            let meta = Meta {
                name: text(&st["metadata"]["name"]),
                image: text(&st["image"]["image"]).or_else(|| text(&st["imageRef"])),
                ..Meta::default()
            };
            Some(meta.with_k8s_labels(&st["labels"]))
        }
    }
}

/// What podman and CRI-O's storage (containers/storage) says of container
/// `id` in its `containers.json`: the names, and the image's name in the
/// entry's metadata.
pub fn parse_storage_containers(json: &str, id: &str) -> Option<Meta> {
    let all: serde_json::Value = serde_json::from_str(json).ok()?;
    let c = all.as_array()?.iter().find(|c| c["id"] == id)?;
    let meta: serde_json::Value = c["metadata"]
        .as_str()
        .and_then(|m| serde_json::from_str(m).ok())
        .unwrap_or_default();
    Some(Meta {
        name: text(&c["names"][0]).or_else(|| text(&meta["name"])),
        image: text(&meta["image-name"]),
        ..Meta::default()
    })
}

/// A container's metadata from its runtime's own files, without running the
/// runtime: a millisecond, where `podman inspect` takes tens (about what a
/// container takes to start, so its first events would go out unnamed).
/// podman and CRI-O: containers/storage's `containers.json`, and the
/// Kubernetes labels among the OCI config's annotations; docker: the
/// container's `config.v2.json`. containerd keeps a database: `crictl`.
fn read_metadata(rt: Runtime, id: &str) -> Option<Meta> {
    match rt {
        Runtime::Podman | Runtime::CriO => {
            let root = Path::new("/var/lib/containers/storage");
            // One directory per storage driver: overlay-containers, vfs-containers, ...
            let dir = std::fs::read_dir(root)
                .ok()?
                .flatten()
                .map(|e| e.path())
                .find(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().ends_with("-containers"))
                        && p.join(id).is_dir()
                })?;
            let meta = parse_storage_containers(
                &std::fs::read_to_string(dir.join("containers.json")).ok()?,
                id,
            )?;
            // A CRI-O container's Kubernetes labels are among its OCI config's annotations.
            let config = std::fs::read_to_string(dir.join(id).join("userdata/config.json"))
                .unwrap_or_default();
            let config: serde_json::Value = serde_json::from_str(&config).unwrap_or_default();
            Some(meta.with_k8s_labels(&config["annotations"]))
        }
        Runtime::Docker => {
            let text =
                std::fs::read_to_string(format!("/var/lib/docker/containers/{id}/config.v2.json"))
                    .ok()?;
            parse_inspect(Runtime::Docker, &text)
        }
        Runtime::Containerd => None,
    }
}

/// What the runtime says of a container: its files first, then its CLI.
fn lookup(rt: Runtime, id: &str) -> Option<Meta> {
    read_metadata(rt, id)
        .filter(|m| m.name.is_some())
        .or_else(|| inspect(rt, id))
}

fn inspect(rt: Runtime, id: &str) -> Option<Meta> {
    let out = match rt {
        Runtime::Podman => Command::new("podman")
            .args(["inspect", "--type", "container", id])
            .output(),
        Runtime::Docker => Command::new("docker")
            .args(["inspect", "--type", "container", id])
            .output(),
        Runtime::Containerd | Runtime::CriO => {
            Command::new("crictl").args(["inspect", id]).output()
        }
    }
    .ok()?;
    if !out.status.success() {
        return None;
    }
    parse_inspect(rt, &String::from_utf8_lossy(&out.stdout))
}

/// What the resolver thread is asked to do.
enum Ask {
    /// Look the container up (once).
    Inspect(Runtime, String),
    /// The container's cgroup is gone: forget it.
    Forget(String),
}

/// Containers whose answers are kept at most (a bound for hosts where the
/// watch cannot see removals: answers then start over past it).
const MAX_ANSWERS: usize = 1 << 14;

/// Answers from the runtimes, filled by the resolver thread.
#[derive(Default)]
struct Answers {
    meta: Mutex<HashMap<String, Option<Meta>>>,
    /// Bumped at every answer: a consumer with unanswered entries looks again.
    generation: AtomicU64,
}

/// One cgroup's attribution, as the consumer writes it into each event.
struct Attribution {
    runtime: Runtime,
    id: String,
    /// `,"container":{...}`, ready to copy into the line.
    json: Vec<u8>,
    answered: bool,
    /// The answers' generation when this entry last looked for its answer.
    checked: u64,
}

/// The consumer's side: cgroup id → the event's `container` field.
pub struct Containers {
    /// The cgroup2 mount, for open_by_handle_at.
    mount: File,
    by_cgroup: HashMap<u64, Option<Attribution>>,
    answers: Arc<Answers>,
    asks: SyncSender<Ask>,
    /// Cgroup ids that could not be turned into a path (gone already).
    pub unresolved_cgroups: u64,
}

/// Cgroup ids cached before the cache starts over (a long run makes
/// cgroups without end: one per container, service or session).
const MAX_CGROUPS: usize = 1 << 16;

impl Containers {
    /// None when there is no cgroup2 mount (no ids to resolve).
    pub fn start() -> Option<Containers> {
        let root = cgroup2_mount()?;
        let mount = File::open(&root).ok()?;
        let answers = Arc::new(Answers::default());
        // Bounded: a flood of new containers waits for the next event of each.
        let (asks, rx) = sync_channel::<Ask>(256);
        let theirs = Arc::clone(&answers);
        std::thread::Builder::new()
            .name("custos-containers".into())
            .spawn(move || {
                for ask in rx {
                    match ask {
                        Ask::Inspect(rt, id) => {
                            if theirs.meta.lock().unwrap().contains_key(&id) {
                                continue;
                            }
                            let meta = lookup(rt, &id);
                            let mut known = theirs.meta.lock().unwrap();
                            if known.len() >= MAX_ANSWERS {
                                known.clear();
                            }
                            known.insert(id, meta);
                        }
                        Ask::Forget(id) => {
                            theirs.meta.lock().unwrap().remove(&id);
                        }
                    }
                    theirs.generation.fetch_add(1, Ordering::Release);
                }
            })
            .ok()?;
        let watch_asks = asks.clone();
        // Without the watch, containers are still found at their first event.
        let _ = std::thread::Builder::new()
            .name("custos-cgroups".into())
            .spawn(move || watch_cgroups(&root, &watch_asks));
        Some(Containers {
            mount,
            by_cgroup: HashMap::new(),
            answers,
            asks,
            unresolved_cgroups: 0,
        })
    }

    /// Whether the runtime's answer about container `id` is held (tests).
    pub fn knows(&self, id: &str) -> bool {
        self.answers.meta.lock().unwrap().contains_key(id)
    }

    /// The `,"container":{...}` field of events in cgroup `cgroup_id`, or
    /// nothing for a process outside any container.
    pub fn field(&mut self, cgroup_id: u64) -> Option<&[u8]> {
        let generation = self.answers.generation.load(Ordering::Acquire);
        if self.by_cgroup.len() >= MAX_CGROUPS && !self.by_cgroup.contains_key(&cgroup_id) {
            self.by_cgroup.clear();
        }
        // One hash lookup per event; a new cgroup id is resolved once.
        let entry = match self.by_cgroup.entry(cgroup_id) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let found = match cgroup_path(&self.mount, cgroup_id) {
                    Some(path) => container_of_cgroup(&path.to_string_lossy()),
                    None => {
                        self.unresolved_cgroups += 1;
                        None
                    }
                };
                e.insert(found.map(|(runtime, id)| {
                    // Full: asked again at a later event (see below).
                    let _ = self.asks.try_send(Ask::Inspect(runtime, id.clone()));
                    Attribution {
                        json: field_json(runtime, &id, None),
                        runtime,
                        id,
                        answered: false,
                        checked: u64::MAX,
                    }
                }))
            }
        }
        .as_mut()?;
        if !entry.answered && entry.checked != generation {
            entry.checked = generation;
            if let Some(meta) = self.answers.meta.lock().unwrap().get(&entry.id) {
                entry.json = field_json(entry.runtime, &entry.id, meta.as_ref());
                entry.answered = true;
            } else {
                // Asked before the thread had room: ask again.
                let _ = self
                    .asks
                    .try_send(Ask::Inspect(entry.runtime, entry.id.clone()));
            }
        }
        Some(&entry.json)
    }
}

fn field_json(rt: Runtime, id: &str, meta: Option<&Meta>) -> Vec<u8> {
    let mut m = serde_json::Map::new();
    m.insert("id".into(), id.into());
    m.insert("runtime".into(), rt.name().into());
    if let Some(meta) = meta {
        for (k, v) in [
            ("name", &meta.name),
            ("image", &meta.image),
            ("pod", &meta.pod),
            ("namespace", &meta.namespace),
            ("container_name", &meta.container_name),
        ] {
            if let Some(v) = v {
                m.insert(k.into(), v.clone().into());
            }
        }
    }
    let mut out = b",\"container\":".to_vec();
    serde_json::to_writer(&mut out, &m).expect("a map of strings serializes");
    out
}

/// Directories of the cgroup tree watched at most (inotify watches are a
/// per-user kernel resource; a host with more cgroups than this still has
/// its containers found at their first event).
const MAX_WATCHES: usize = 8192;

/// Watches the cgroup tree under `root` for container cgroups being made
/// and removed, and tells the resolver thread. Returns if inotify fails.
fn watch_cgroups(root: &Path, asks: &SyncSender<Ask>) {
    use inotify::{EventMask, Inotify, WatchMask};
    let Ok(mut inotify) = Inotify::init() else {
        return;
    };
    let mask = WatchMask::CREATE | WatchMask::DELETE | WatchMask::ONLYDIR;
    let mut dirs = HashMap::new();
    // Watches `queue`'s directories and those below them; with `look`, asks
    // about the containers among them (what was made in a new directory
    // before its watch was added made no event: a runtime's parent cgroup
    // and the container's at once).
    let watch = |inotify: &mut Inotify,
                 dirs: &mut HashMap<inotify::WatchDescriptor, PathBuf>,
                 start: Vec<PathBuf>,
                 look: bool| {
        let mut queue = std::collections::VecDeque::from(start);
        while let Some(dir) = queue.pop_front() {
            if dirs.len() >= MAX_WATCHES {
                break;
            }
            let Ok(wd) = inotify.watches().add(&dir, mask) else {
                continue;
            };
            for child in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if child.file_type().is_ok_and(|t| t.is_dir()) {
                    if let Some((rt, id)) = look
                        .then(|| container_of_cgroup(&child.path().to_string_lossy()))
                        .flatten()
                    {
                        let _ = asks.try_send(Ask::Inspect(rt, id));
                    }
                    queue.push_back(child.path());
                }
            }
            dirs.insert(wd, dir);
        }
    };
    // The tree as it is now: its containers are asked about at their first event.
    watch(&mut inotify, &mut dirs, vec![root.to_path_buf()], false);
    let mut buf = [0u8; 8192];
    loop {
        let Ok(events) = inotify.read_events_blocking(&mut buf) else {
            return;
        };
        let mut added = Vec::new();
        for ev in events {
            if ev.mask.contains(EventMask::IGNORED) {
                dirs.remove(&ev.wd);
                continue;
            }
            let (Some(dir), Some(name)) = (dirs.get(&ev.wd), ev.name) else {
                continue;
            };
            if !ev.mask.contains(EventMask::ISDIR) {
                continue;
            }
            let path = dir.join(name);
            let container = container_of_cgroup(&path.to_string_lossy());
            if ev.mask.contains(EventMask::CREATE) {
                if let Some((rt, id)) = container {
                    // A container sends no event before its cgroup exists.
                    let _ = asks.try_send(Ask::Inspect(rt, id));
                }
                added.push(path);
            } else if ev.mask.contains(EventMask::DELETE) {
                // podman's nested `container` cgroup names it too: forget it with its own.
                if let Some((_, id)) =
                    container.filter(|_| path.file_name().is_some_and(|n| n != "container"))
                {
                    let _ = asks.try_send(Ask::Forget(id));
                }
            }
        }
        watch(&mut inotify, &mut dirs, added, true);
    }
}

/// Where cgroup v2 is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified on
/// a hybrid host).
fn cgroup2_mount() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        if right.split(' ').next() != Some("cgroup2") {
            return None;
        }
        Some(PathBuf::from(left.split(' ').nth(4)?))
    })
}

/// The path of the cgroup with id `id` (the kernel's file handle of a
/// cgroup2 directory is its id), or None if it is gone.
fn cgroup_path(mount: &File, id: u64) -> Option<PathBuf> {
    #[repr(C)]
    struct KernfsHandle {
        handle_bytes: u32,
        handle_type: i32,
        id: u64,
    }
    const FILEID_KERNFS: i32 = 0xfe;
    let mut h = KernfsHandle {
        handle_bytes: 8,
        handle_type: FILEID_KERNFS,
        id,
    };
    // SAFETY: a file_handle header followed by its 8 handle bytes.
    let fd = unsafe {
        libc::open_by_handle_at(
            mount.as_raw_fd(),
            (&mut h as *mut KernfsHandle).cast(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    let path = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok();
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
    path
}

/// The cgroup id of a cgroup2 directory: its inode (test helper and docs).
pub fn cgroup_id_of(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata(dir)?.ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_storage_names_a_container_and_its_image() {
        // The shape of /var/lib/containers/storage/overlay-containers/containers.json.
        let json = format!(
            r#"[{{"id":"{}","names":["other"],"image":"aa","metadata":"{{}}"}},
               {{"id":"{ID}","names":["web"],"image":"a9d8","layer":"x","metadata":"{{\"image-name\":\"localhost/web:1\",\"image-id\":\"a9d8\",\"name\":\"web\",\"created-at\":1795481891}}","created":"2026-11-24T00:58:11Z"}}]"#,
            "b".repeat(64)
        );
        let m = parse_storage_containers(&json, ID).unwrap();
        assert_eq!(
            (m.name.as_deref(), m.image.as_deref()),
            (Some("web"), Some("localhost/web:1"))
        );
        assert!(parse_storage_containers(&json, &"c".repeat(64)).is_none());
        assert!(parse_storage_containers("not json", ID).is_none());
    }

    /// The watch sees a container's cgroup made (also one made at once with
    /// its parent) and asks the runtime before any event of it; it forgets
    /// the container when the cgroup goes. Needs root and a cgroup2 mount.
    #[test]
    fn a_container_cgroup_is_looked_up_when_made_and_forgotten_when_removed() {
        let Some(root) = cgroup2_mount() else { return };
        let c = Containers::start().expect("the attribution starts");
        std::thread::sleep(std::time::Duration::from_millis(200));
        let parent = root.join(format!("custos-test-{}", std::process::id()));
        let id = format!(
            "{:064x}",
            std::process::id() as u128 * 0x9e37_79b9_7f4a_7c15
        );
        let cgroup = parent.join(format!("libpod-{id}"));
        std::fs::create_dir_all(&cgroup).expect("making a cgroup (root)");
        let wait = |want: bool| {
            let t = std::time::Instant::now();
            while c.knows(&id) != want {
                assert!(
                    t.elapsed().as_secs() < 20,
                    "the watch did not {} container {id}",
                    if want { "find" } else { "forget" }
                );
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        };
        wait(true);
        std::fs::remove_dir(&cgroup).unwrap();
        std::fs::remove_dir(&parent).unwrap();
        wait(false);
    }

    const ID: &str = "a645602bee1d82d0ea2680a6e792cd4c6e5c76ce3d468fe990f23c1e8154623e";

    #[test]
    fn cgroup_names_of_each_runtime_give_the_container() {
        let cases = [
            (format!("/libpod_parent/libpod-{ID}"), Some(Runtime::Podman)),
            (format!("/machine.slice/libpod-{ID}.scope/container"), Some(Runtime::Podman)),
            (format!("/machine.slice/libpod-conmon-{ID}.scope"), None),
            (format!("/system.slice/docker-{ID}.scope"), Some(Runtime::Docker)),
            (format!("/docker/{ID}"), Some(Runtime::Docker)),
            (format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/cri-containerd-{ID}.scope"), Some(Runtime::Containerd)),
            (format!("/kubepods/burstable/pod5f0c/{ID}"), Some(Runtime::Containerd)),
            (format!("/kubepods.slice/kubepods-pod1.slice/crio-{ID}.scope"), Some(Runtime::CriO)),
            ("/user.slice/user-1000.slice/session-3.scope".to_string(), None),
            ("/".to_string(), None),
            (format!("/system.slice/{ID}"), None),
            ("/system.slice/docker-notanid.scope".to_string(), None),
        ];
        for (path, rt) in cases {
            let got = container_of_cgroup(&path);
            assert_eq!(got.as_ref().map(|g| g.0), rt, "{path}");
            if rt.is_some() {
                assert_eq!(got.unwrap().1, ID, "{path}");
            }
        }
    }

    #[test]
    fn inspect_answers_of_each_runtime_give_name_image_and_pod() {
        let podman = r#"[{"Id":"x","Name":"web","ImageName":"localhost/custos-busybox:1","Config":{"Image":"ignored","Labels":null}}]"#;
        let m = parse_inspect(Runtime::Podman, podman).unwrap();
        assert_eq!(
            (m.name.as_deref(), m.image.as_deref(), m.pod.as_deref()),
            (Some("web"), Some("localhost/custos-busybox:1"), None)
        );
        let docker = r#"[{"Id":"x","Name":"/db","Config":{"Image":"postgres:16","Labels":{"io.kubernetes.pod.name":"p1","io.kubernetes.pod.namespace":"prod","io.kubernetes.container.name":"db"}}}]"#;
        let m = parse_inspect(Runtime::Docker, docker).unwrap();
        assert_eq!(m.name.as_deref(), Some("db"));
        assert_eq!(m.image.as_deref(), Some("postgres:16"));
        assert_eq!(
            (
                m.pod.as_deref(),
                m.namespace.as_deref(),
                m.container_name.as_deref()
            ),
            (Some("p1"), Some("prod"), Some("db"))
        );
        let cri = r#"{"status":{"metadata":{"name":"app"},"image":{"image":"docker.io/library/nginx:1"},"labels":{"io.kubernetes.pod.name":"web-7d","io.kubernetes.pod.namespace":"default","io.kubernetes.container.name":"app"}}}"#;
        let m = parse_inspect(Runtime::Containerd, cri).unwrap();
        assert_eq!(
            (m.name.as_deref(), m.image.as_deref(), m.pod.as_deref()),
            (
                Some("app"),
                Some("docker.io/library/nginx:1"),
                Some("web-7d")
            )
        );
        assert!(parse_inspect(Runtime::Podman, "not json").is_none());
    }

    #[test]
    fn the_field_is_valid_json_with_what_is_known() {
        let only_id = field_json(Runtime::Podman, ID, None);
        let v: serde_json::Value =
            serde_json::from_slice(&only_id[b",\"container\":".len()..]).unwrap();
        assert_eq!(v, serde_json::json!({"id": ID, "runtime": "podman"}));
        let meta = Meta {
            name: Some("we\"b".into()),
            image: Some("img".into()),
            ..Default::default()
        };
        let full = field_json(Runtime::Podman, ID, Some(&meta));
        let v: serde_json::Value =
            serde_json::from_slice(&full[b",\"container\":".len()..]).unwrap();
        assert_eq!(v["name"], "we\"b");
        assert_eq!(v["image"], "img");
    }

    #[test]
    fn a_cgroup_id_turns_back_into_its_directory() {
        // Needs a cgroup2 mount and CAP_DAC_READ_SEARCH, as the collector does.
        let mount = cgroup2_mount().expect("a cgroup2 mount");
        let f = File::open(&mount).unwrap();
        let id = cgroup_id_of(&mount).unwrap();
        assert_eq!(cgroup_path(&f, id).as_deref(), Some(mount.as_path()));
        assert_eq!(cgroup_path(&f, u64::MAX - 7), None);
    }
}
