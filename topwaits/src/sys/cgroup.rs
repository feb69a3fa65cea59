//! Cgroups as `--cgroup`, `--unit` and `--container` name them: the mounted
//! hierarchies (from `/proc/self/mountinfo`), a cgroup found by its path, by a
//! systemd unit's name or by a container's ID, and the threads in it and below.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

/// One mounted cgroup hierarchy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// Where it is mounted.
    pub dir: PathBuf,
    /// The unified (v2) hierarchy, or a v1 one.
    pub unified: bool,
    /// A v1 hierarchy's controllers, and its `name=` if it has one, as
    /// `/proc/PID/cgroup` lists them (`memory`, `name=systemd`); none for v2.
    pub controllers: Vec<String>,
}

/// A cgroup found: where it lies and what the programs need to recognise it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cgroup {
    /// Its directory.
    pub dir: PathBuf,
    /// Its path within its hierarchy (`/` for the root), as `/proc/PID/cgroup`
    /// shows it.
    pub path: String,
    /// Its id (the inode number of its directory, which is its kernfs id).
    pub id: u64,
    /// Its hierarchy's id: 0 for the unified one.
    pub hierarchy: u32,
    /// Its depth below the hierarchy's root.
    pub level: u32,
    pub unified: bool,
}

/// Why a cgroup could not be found. Each is one line that names what to check.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CgroupError {
    #[error(
        "no cgroup hierarchy is mounted (looked for cgroup and cgroup2 in /proc/self/mountinfo)"
    )]
    NoHierarchy,
    #[error("no cgroup {0}: not a directory of any mounted cgroup hierarchy ({1})")]
    NoCgroup(String, String),
    #[error("no systemd unit {0} is running: no cgroup of that name under {1}")]
    NoUnit(String, String),
    #[error("bad container ID {0:?}: expected hexadecimal digits (at least 4), as `docker ps` or `crictl ps` show them")]
    BadContainerId(String),
    #[error("no container {0} is running: no cgroup of docker, containerd, CRI-O or podman names it under {1}")]
    NoContainer(String, String),
    #[error("container ID {0} is ambiguous: it begins {1}; give more of it")]
    AmbiguousContainer(String, String),
    #[error("failed to read cgroup {0}: {1}")]
    Unreadable(String, String),
}

/// The cgroup hierarchies in mountinfo text, the unified one first. A
/// hierarchy mounted more than once is listed once, at its first mount point.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    let mut out: Vec<Mount> = Vec::new();
    for line in text.lines() {
        // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let fields: Vec<&str> = left.split(' ').collect();
        let theirs: Vec<&str> = right.split(' ').collect();
        let (Some(&root), Some(&dir), Some(&fstype)) =
            (fields.get(3), fields.get(4), theirs.first())
        else {
            continue;
        };
        // A bind mount of a cgroup below a hierarchy's root is not the hierarchy.
        if root != "/" {
            continue;
        }
        let unified = match fstype {
            "cgroup2" => true,
            "cgroup" => false,
            _ => continue,
        };
        let mut controllers: Vec<String> = if unified {
            Vec::new()
        } else {
            let opts = theirs.get(2).copied().unwrap_or("");
            // The super options are the controllers, `name=`, and flags.
            const FLAGS: &[&str] = &[
                "rw",
                "ro",
                "xattr",
                "noprefix",
                "clone_children",
                "cpuset_v2_mode",
                "favordynmods",
                "none",
            ];
            opts.split(',')
                .filter(|o| o.starts_with("name=") || !o.contains('=') && !FLAGS.contains(o))
                .map(str::to_string)
                .collect()
        };
        controllers.sort();
        let m = Mount { dir: PathBuf::from(unescape(dir)), unified, controllers };
        if !out.iter().any(|o| o.unified == m.unified && o.controllers == m.controllers) {
            out.push(m);
        }
    }
    out.sort_by_key(|m| !m.unified);
    out
}

/// Mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v as char);
            i += 4;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// The hierarchy id of each v1 controller list in `/proc/PID/cgroup` text
/// (`4:memory:/x`), its controllers sorted.
pub fn parse_hierarchy_ids(text: &str) -> Vec<(u32, Vec<String>)> {
    text.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let id: u32 = parts.next()?.parse().ok()?;
            let mut controllers: Vec<String> =
                parts.next()?.split(',').filter(|c| !c.is_empty()).map(str::to_string).collect();
            controllers.sort();
            Some((id, controllers))
        })
        .collect()
}

/// The mounted hierarchies of this machine, the unified one first.
pub fn mounts() -> Result<Vec<Mount>, CgroupError> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let m = parse_mountinfo(&text);
    if m.is_empty() {
        return Err(CgroupError::NoHierarchy);
    }
    Ok(m)
}

fn listed(mounts: &[Mount]) -> String {
    mounts.iter().map(|m| m.dir.display().to_string()).collect::<Vec<_>>().join(", ")
}

/// The cgroup at `dir`, a directory of hierarchy `mount`.
fn cgroup_at(mount: &Mount, dir: &Path) -> Result<Cgroup, CgroupError> {
    let shown = || dir.display().to_string();
    let meta =
        std::fs::metadata(dir).map_err(|e| CgroupError::Unreadable(shown(), e.to_string()))?;
    let rel = dir
        .strip_prefix(&mount.dir)
        .map_err(|_| CgroupError::NoCgroup(shown(), listed(std::slice::from_ref(mount))))?;
    let level = rel.components().count() as u32;
    let hierarchy = if mount.unified {
        0
    } else {
        let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        parse_hierarchy_ids(&text)
            .into_iter()
            .find(|(_, c)| *c == mount.controllers)
            .map_or(u32::MAX, |(id, _)| id)
    };
    Ok(Cgroup {
        dir: dir.to_path_buf(),
        path: format!("/{}", rel.display()),
        id: meta.ino(),
        hierarchy,
        level,
        unified: mount.unified,
    })
}

/// The cgroup `--cgroup` names: a directory of a mounted hierarchy, or a path
/// within one (`/system.slice/x.service`), looked for in the unified hierarchy
/// first.
pub fn by_path(arg: &str, mounts: &[Mount]) -> Result<Cgroup, CgroupError> {
    let given = Path::new(arg);
    if given.is_absolute() {
        if let Some(m) = mounts
            .iter()
            .filter(|m| given.starts_with(&m.dir))
            .max_by_key(|m| m.dir.as_os_str().len())
        {
            if given.is_dir() {
                return cgroup_at(m, given);
            }
        }
    }
    let rel = arg.trim_start_matches('/');
    for m in mounts {
        let dir = m.dir.join(rel);
        if !rel.split('/').any(|c| c == "..") && dir.join(control_file(m)).exists() {
            return cgroup_at(m, &dir);
        }
    }
    Err(CgroupError::NoCgroup(arg.to_string(), listed(mounts)))
}

/// The file listing a cgroup's threads.
fn control_file(m: &Mount) -> &'static str {
    if m.unified {
        "cgroup.threads"
    } else {
        "tasks"
    }
}

/// The hierarchies to search for units and containers: the unified one and
/// systemd's own v1 one, which hold every unit; else the first v1 one.
fn searched(mounts: &[Mount]) -> Vec<&Mount> {
    let main: Vec<&Mount> = mounts
        .iter()
        .filter(|m| m.unified || m.controllers.iter().any(|c| c == "name=systemd"))
        .collect();
    if main.is_empty() {
        mounts.iter().take(1).collect()
    } else {
        main
    }
}

/// Every cgroup directory below `root` (itself included), shallowest first,
/// with its depth; no deeper than 12 levels.
fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.to_path_buf()];
    let mut i = 0;
    while i < out.len() && out.len() < 200_000 {
        let dir = out[i].clone();
        i += 1;
        if dir.strip_prefix(root).map_or(0, |r| r.components().count()) >= 12 {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut subs: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        subs.sort();
        out.extend(subs);
    }
    out
}

/// A unit's name as systemd spells it: a name without a type is a service.
pub fn unit_name(name: &str) -> String {
    const TYPES: &[&str] = &[
        ".service", ".scope", ".slice", ".socket", ".mount", ".swap", ".timer", ".target", ".path",
        ".device",
    ];
    if TYPES.iter().any(|t| name.ends_with(t)) {
        name.to_string()
    } else {
        format!("{name}.service")
    }
}

/// The cgroup of systemd unit `name` (`nginx` is `nginx.service`), found in
/// the cgroup tree, where systemd names each unit's cgroup after it: no D-Bus.
pub fn by_unit(name: &str, mounts: &[Mount]) -> Result<Cgroup, CgroupError> {
    let unit = unit_name(name);
    let places = searched(mounts);
    for m in &places {
        if let Some(dir) =
            walk(&m.dir).into_iter().find(|d| d.file_name().is_some_and(|f| f == unit.as_str()))
        {
            return cgroup_at(m, &dir);
        }
    }
    Err(CgroupError::NoUnit(
        unit,
        places.iter().map(|m| m.dir.display().to_string()).collect::<Vec<_>>().join(", "),
    ))
}

/// The container ID a cgroup directory's name carries, as the common runtimes
/// name them: `docker-ID.scope` (docker with systemd), `cri-containerd-ID.scope`
/// (containerd), `crio-ID.scope` (CRI-O), `libpod-ID.scope` (podman), or the
/// bare ID (docker and containerd with cgroupfs: `/docker/ID`,
/// `/kubepods/burstable/podUID/ID`). The runtimes' monitors (`crio-conmon-`,
/// `libpod-conmon-`) are not the container.
pub fn container_id_of(dir_name: &str) -> Option<&str> {
    let is_id = |s: &str| {
        s.len() >= 32 && s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    };
    if let Some(scope) = dir_name.strip_suffix(".scope") {
        if scope.contains("conmon-") {
            return None;
        }
        let id = ["docker-", "cri-containerd-", "crio-", "libpod-"]
            .iter()
            .find_map(|p| scope.strip_prefix(p))?;
        return is_id(id).then_some(id);
    }
    is_id(dir_name).then_some(dir_name)
}

/// The cgroup of the container whose ID is `id` or begins with it.
pub fn by_container(id: &str, mounts: &[Mount]) -> Result<Cgroup, CgroupError> {
    // As Kubernetes shows it (`containerd://ID`, `cri-o://ID`, `docker://ID`).
    let id = id.trim().rsplit("://").next().unwrap_or(id).to_ascii_lowercase();
    if id.len() < 4 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(CgroupError::BadContainerId(id));
    }
    let places = searched(mounts);
    for m in &places {
        let found: Vec<(PathBuf, String)> = walk(&m.dir)
            .into_iter()
            .filter_map(|d| {
                let full = container_id_of(d.file_name()?.to_str()?)?.to_string();
                full.starts_with(&id).then_some((d, full))
            })
            .collect();
        let ids: BTreeSet<&str> = found.iter().map(|(_, f)| f.as_str()).collect();
        match ids.len() {
            0 => continue,
            1 => {
                // The shallowest: a container's own cgroup, not one a runtime
                // made inside it.
                let (dir, _) =
                    found.iter().min_by_key(|(d, _)| d.components().count()).expect("one found");
                return cgroup_at(m, dir);
            }
            _ => {
                let shown: Vec<String> =
                    ids.iter().map(|i| i[..12.min(i.len())].to_string()).collect();
                return Err(CgroupError::AmbiguousContainer(id, shown.join(", ")));
            }
        }
    }
    Err(CgroupError::NoContainer(
        id,
        places.iter().map(|m| m.dir.display().to_string()).collect::<Vec<_>>().join(", "),
    ))
}

/// The threads in cgroup `cg` and the cgroups below it now.
pub fn threads_in(cg: &Cgroup) -> Vec<u32> {
    let file = if cg.unified { "cgroup.threads" } else { "tasks" };
    let mut out: BTreeSet<u32> = BTreeSet::new();
    for dir in walk(&cg.dir) {
        if let Ok(text) = std::fs::read_to_string(dir.join(file)) {
            out.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        }
    }
    out.into_iter().collect()
}

/// The cgroup a process is in, from its `/proc/PID/cgroup` text, as a path
/// within its hierarchy: the unified (v2) one's, unless that is the root and a
/// v1 hierarchy places it deeper (a hybrid system whose container runtime uses
/// v1), then systemd's v1 hierarchy's, else the first v1 one's.
pub fn parse_proc_cgroup(text: &str) -> Option<String> {
    let mut unified = None;
    let mut systemd = None;
    let mut first_v1 = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if !path.starts_with('/') {
            continue;
        }
        if id == "0" && controllers.is_empty() {
            unified = Some(path);
        } else if controllers.split(',').any(|c| c == "name=systemd") {
            systemd = Some(path);
        } else if first_v1.is_none() {
            first_v1 = Some(path);
        }
    }
    let v1 = systemd.or(first_v1).filter(|p| *p != "/");
    match unified {
        Some("/") => v1.or(unified),
        Some(p) => Some(p),
        None => systemd.or(first_v1),
    }
    .map(str::to_string)
}

/// The cgroup process `tgid` is in now (see [`parse_proc_cgroup`]).
pub fn of_process(tgid: u32) -> Option<String> {
    parse_proc_cgroup(&crate::sys::procfs::read_text(format!("/proc/{tgid}/cgroup")).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
25 30 0:23 / /sys rw,nosuid shared:7 - sysfs sysfs rw
31 25 0:26 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755
32 31 0:27 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw,nsdelegate
33 31 0:28 / /sys/fs/cgroup/systemd rw,nosuid shared:11 - cgroup cgroup rw,xattr,name=systemd
36 31 0:31 / /sys/fs/cgroup/memory rw,nosuid shared:15 - cgroup cgroup rw,memory
37 31 0:32 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:16 - cgroup cgroup rw,cpu,cpuacct
38 31 0:31 /docker /mnt/bound rw - cgroup cgroup rw,memory
39 31 0:27 / /mnt/my\\040cgroups rw - cgroup2 cgroup2 rw
";

    #[test]
    fn mountinfo_lists_each_hierarchy_once_unified_first() {
        let m = parse_mountinfo(MOUNTINFO);
        let dirs: Vec<_> = m.iter().map(|m| m.dir.display().to_string()).collect();
        assert_eq!(
            dirs,
            [
                "/sys/fs/cgroup/unified",
                "/sys/fs/cgroup/systemd",
                "/sys/fs/cgroup/memory",
                "/sys/fs/cgroup/cpu,cpuacct"
            ]
        );
        assert_eq!(m[1].controllers, ["name=systemd"]);
        assert_eq!(m[3].controllers, ["cpu", "cpuacct"]);
        assert!(m[0].unified && !m[2].unified);
    }

    #[test]
    fn mount_points_are_unescaped() {
        let m = parse_mountinfo("39 31 0:27 / /mnt/my\\040cgroups rw - cgroup2 cgroup2 rw\n");
        assert_eq!(m[0].dir, Path::new("/mnt/my cgroups"));
    }

    #[test]
    fn hierarchy_ids_come_with_their_controllers() {
        let ids =
            parse_hierarchy_ids("12:cpuacct,cpu:/\n9:name=systemd:/user.slice\n0::/init.scope\n");
        assert_eq!(ids[0], (12, vec!["cpu".to_string(), "cpuacct".to_string()]));
        assert_eq!(ids[1], (9, vec!["name=systemd".to_string()]));
        assert_eq!(ids[2], (0, vec![]));
    }

    #[test]
    fn units_without_a_type_are_services() {
        assert_eq!(unit_name("nginx"), "nginx.service");
        assert_eq!(unit_name("run-r1.scope"), "run-r1.scope");
        assert_eq!(unit_name("system.slice"), "system.slice");
        assert_eq!(unit_name("postgresql@15-main"), "postgresql@15-main.service");
    }

    const ID: &str = "3f2a1b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a";

    #[test]
    fn container_ids_are_read_from_every_runtimes_names() {
        // docker and containerd (cgroupfs driver), and Kubernetes' pod slices.
        assert_eq!(container_id_of(ID), Some(ID));
        // docker, containerd, CRI-O and podman with the systemd driver.
        for prefix in ["docker-", "cri-containerd-", "crio-", "libpod-"] {
            assert_eq!(container_id_of(&format!("{prefix}{ID}.scope")), Some(ID), "{prefix}");
        }
        // The runtimes' monitors, slices and other units are not containers.
        assert_eq!(container_id_of(&format!("crio-conmon-{ID}.scope")), None);
        assert_eq!(container_id_of(&format!("libpod-conmon-{ID}.scope")), None);
        assert_eq!(
            container_id_of("kubepods-burstable-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice"),
            None
        );
        assert_eq!(container_id_of("session-3.scope"), None);
        assert_eq!(container_id_of("docker.service"), None);
        assert_eq!(container_id_of("deadbeef"), None, "too short to be an ID");
        assert_eq!(
            container_id_of(&ID.to_uppercase()),
            None,
            "the runtimes write IDs in lower case"
        );
    }

    /// A hierarchy built in a temporary directory, with the layouts of the
    /// runtimes side by side.
    fn fake_tree() -> (PathBuf, Vec<Mount>) {
        let root = std::env::temp_dir().join(format!(
            "topwaits-cgroup-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        let other = "3f2a1b000000000000000000000000000000000000000000000000000000beef";
        for d in [
            format!("system.slice/docker-{ID}.scope"),
            "system.slice/nginx.service".to_string(),
            format!("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podaa.slice/cri-containerd-{other}.scope"),
            format!("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podaa.slice/crio-conmon-{ID}.scope"),
        ] {
            std::fs::create_dir_all(root.join(&d)).unwrap();
            std::fs::write(root.join(&d).join("cgroup.threads"), "").unwrap();
        }
        std::fs::write(root.join("system.slice/nginx.service/cgroup.threads"), "12\n7\n").unwrap();
        std::fs::create_dir_all(root.join("system.slice/nginx.service/sub")).unwrap();
        std::fs::write(root.join("system.slice/nginx.service/sub/cgroup.threads"), "9\n12\n")
            .unwrap();
        let mounts = vec![Mount { dir: root.clone(), unified: true, controllers: vec![] }];
        (root, mounts)
    }

    #[test]
    fn containers_are_found_by_a_unique_prefix() {
        let (root, mounts) = fake_tree();
        let cg = by_container(&ID[..12], &mounts).unwrap();
        assert_eq!(cg.path, format!("/system.slice/docker-{ID}.scope"));
        assert_eq!((cg.level, cg.hierarchy), (2, 0));
        // Both IDs begin 3f2a1b: which one is meant is not known.
        assert!(matches!(
            by_container("3f2a1b", &mounts),
            Err(CgroupError::AmbiguousContainer(..))
        ));
        assert!(matches!(by_container("0123abcd", &mounts), Err(CgroupError::NoContainer(..))));
        assert!(matches!(by_container("xyz!", &mounts), Err(CgroupError::BadContainerId(_))));
        assert!(matches!(by_container("3f", &mounts), Err(CgroupError::BadContainerId(_))));
        // As `kubectl get pod -o jsonpath='{..containerID}'` prints it.
        assert_eq!(by_container(&format!("docker://{ID}"), &mounts).unwrap(), cg);
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn units_and_paths_name_their_cgroups() {
        let (root, mounts) = fake_tree();
        let unit = by_unit("nginx", &mounts).unwrap();
        assert_eq!(unit.path, "/system.slice/nginx.service");
        assert_eq!(by_path("/system.slice/nginx.service", &mounts).unwrap(), unit);
        assert_eq!(by_path(&unit.dir.display().to_string(), &mounts).unwrap(), unit);
        assert_eq!(threads_in(&unit), [7, 9, 12], "below it as well, each thread once");
        assert!(matches!(by_unit("sshd", &mounts), Err(CgroupError::NoUnit(..))));
        assert!(matches!(by_path("/system.slice/none", &mounts), Err(CgroupError::NoCgroup(..))));
        assert!(matches!(by_path("system.slice/../..", &mounts), Err(CgroupError::NoCgroup(..))));
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn a_process_cgroup_is_its_unified_path_unless_only_v1_places_it() {
        let v2 = "0::/system.slice/docker-4f1c.scope\n";
        assert_eq!(parse_proc_cgroup(v2).as_deref(), Some("/system.slice/docker-4f1c.scope"));
        let hybrid = "12:memory:/docker/4f1c\n1:name=systemd:/system.slice/docker.service\n0::/\n";
        assert_eq!(
            parse_proc_cgroup(hybrid).as_deref(),
            Some("/system.slice/docker.service"),
            "systemd's v1 path over the root"
        );
        let hybrid_v2 = "1:name=systemd:/user.slice/x.scope\n0::/user.slice/x.scope\n";
        assert_eq!(parse_proc_cgroup(hybrid_v2).as_deref(), Some("/user.slice/x.scope"));
        let v1_only = "4:cpu,cpuacct:/kubepods/pod1/abc\n3:memory:/kubepods/pod1/abc\n";
        assert_eq!(parse_proc_cgroup(v1_only).as_deref(), Some("/kubepods/pod1/abc"));
        assert_eq!(parse_proc_cgroup("0::/\n").as_deref(), Some("/"), "the root is a cgroup too");
        assert_eq!(parse_proc_cgroup("garbage\n\n"), None);
        // A path may hold ':' (it is split off at the second one only).
        assert_eq!(parse_proc_cgroup("0::/a:b\n").as_deref(), Some("/a:b"));
        let me = of_process(std::process::id()).expect("this process's cgroup");
        assert!(me.starts_with('/'), "{me}");
    }
}
