//! The user stack walker's maps, taken out of the object so that the table loader
//! (`cfi::loader`) and the Python and V8 trackers can fill them while
//! the trace runs.

use anyhow::{anyhow, Context as _, Result};
use aya::maps::{Array, HashMap, MapData};
use topwaits_common::jit::{JitProc, JvmCode};
use topwaits_common::names;
use topwaits_common::python::PyProc;
use topwaits_common::walker::{FileInfo, Node, ProcMaps};

use crate::stacks::cfi::loader::Sink;
use crate::stacks::jit::JitSink;
use crate::stacks::python::PySink;

/// The maps the walker reads: per-process mappings, per-file state, tree nodes.
pub struct UnwindMaps {
    procs: HashMap<MapData, u32, ProcMaps>,
    /// The process map's descriptor again, for batch deletes.
    procs_fd: std::os::fd::OwnedFd,
    files: Array<MapData, FileInfo>,
    nodes: HashMap<MapData, u64, Node>,
    /// The node map's descriptor again, for batch updates, which aya lacks.
    nodes_fd: std::os::fd::OwnedFd,
    /// The node array, filled from its start: trees go there while they fit.
    node_array: Array<MapData, Node>,
    node_array_fd: std::os::fd::OwnedFd,
    /// Nodes placed in the array so far.
    array_used: u32,
    python: HashMap<MapData, u32, PyProc>,
    jit: HashMap<MapData, u32, JitProc>,
    jvm_code: HashMap<MapData, u32, JvmCode>,
    /// Bumped after each Python layout written (see the walker's `PY_EPOCH`).
    py_epoch: Array<MapData, u64>,
    py_layouts: u64,
}

impl UnwindMaps {
    pub(super) fn take(ebpf: &mut aya::Ebpf) -> Result<UnwindMaps> {
        let mut take =
            |name: &str| ebpf.take_map(name).ok_or_else(|| anyhow!("map {name} missing"));
        let (nodes_fd, procs_fd, node_array_fd);
        Ok(UnwindMaps {
            procs: {
                let map = take(names::UNWIND_PROCS)?;
                procs_fd = descriptor(&map, names::UNWIND_PROCS)?;
                HashMap::try_from(map)?
            },
            procs_fd,
            files: Array::try_from(take(names::UNWIND_FILES)?)?,
            nodes: {
                let map = take(names::UNWIND_NODES)?;
                nodes_fd = descriptor(&map, names::UNWIND_NODES)?;
                HashMap::try_from(map)?
            },
            nodes_fd,
            node_array: {
                let map = take(names::UNWIND_NODE_ARRAY)?;
                node_array_fd = descriptor(&map, names::UNWIND_NODE_ARRAY)?;
                Array::try_from(map)?
            },
            node_array_fd,
            array_used: 0,
            python: HashMap::try_from(take(names::PY_PROCS)?)?,
            jit: HashMap::try_from(take(names::JIT_PROCS)?)?,
            jvm_code: HashMap::try_from(take(names::JVM_CODE)?)?,
            py_epoch: Array::try_from(take(names::PY_EPOCH)?)?,
            py_layouts: 0,
        })
    }
}

/// A second descriptor of hash or array map `map` (named `name`), for the
/// batch operations that aya lacks.
fn descriptor(map: &aya::maps::Map, name: &str) -> Result<std::os::fd::OwnedFd> {
    let (aya::maps::Map::HashMap(data) | aya::maps::Map::Array(data)) = map else {
        return Err(anyhow!("map {name} is neither a hash map nor an array"));
    };
    std::os::fd::AsFd::as_fd(data.fd())
        .try_clone_to_owned()
        .with_context(|| format!("duplicating the descriptor of map {name}"))
}

impl Sink for UnwindMaps {
    fn put_proc(&mut self, tgid: u32, maps: &ProcMaps) -> Result<()> {
        self.procs.insert(tgid, maps, 0).with_context(|| format!("mappings of process {tgid}"))
    }

    fn drop_proc(&mut self, tgid: u32) {
        let _ = self.procs.remove(&tgid);
    }

    /// In batches, where the kernel has them: a sweep after a fork storm
    /// drops hundreds.
    fn drop_procs(&mut self, tgids: &[u32]) {
        use std::os::fd::AsFd as _;
        if !matches!(super::batch::delete(self.procs_fd.as_fd(), tgids), Ok(true)) {
            tgids.iter().for_each(|&t| self.drop_proc(t));
        }
    }

    fn put_node(&mut self, key: u64, node: &Node) -> Result<()> {
        self.nodes.insert(key, node, 0).context("unwind table node")
    }

    /// In batches of a thousand, where the kernel has them: writing perf's
    /// and its libraries' tables one node a syscall was a quarter of the
    /// tracer's own CPU under `perf bench sched messaging`.
    fn put_nodes(&mut self, keys: &[u64], nodes: &[Node]) -> Result<()> {
        use std::os::fd::AsFd as _;
        if super::batch::update(self.nodes_fd.as_fd(), keys, nodes).context("unwind table nodes")? {
            return Ok(());
        }
        keys.iter().zip(nodes).try_for_each(|(key, node)| self.put_node(*key, node))
    }

    /// Into the array while the tree fits: an array's element is written in
    /// place, where a hash map's is allocated first (perf's and libc's tables
    /// took 2 ms a start that way, a third of the tracer's CPU over a short
    /// `perf bench sched messaging` run), and the walker finds it without
    /// hashing.
    fn place_nodes(&mut self, nodes: &[Node]) -> Option<u32> {
        use std::os::fd::AsFd as _;
        let first = self.array_used;
        let end = first.checked_add(u32::try_from(nodes.len()).ok()?)?;
        if end > self.node_array.len() {
            return None;
        }
        let indices: Vec<u32> = (first..end).collect();
        let written = match super::batch::update(self.node_array_fd.as_fd(), &indices, nodes) {
            Ok(true) => true,
            Ok(false) => {
                indices.iter().zip(nodes).all(|(&i, n)| self.node_array.set(i, n, 0).is_ok())
            }
            Err(e) => {
                log::debug!("unwind table nodes into the array: {e}");
                false
            }
        };
        // Nodes left half written are never read: no file names them.
        self.array_used = end;
        written.then_some(first)
    }

    fn put_file(&mut self, id: u32, info: FileInfo) -> Result<()> {
        self.files.set(id, info, 0).context("unwind table state")
    }
}

impl UnwindMaps {
    /// After a runtime's layout is written: a walk that sees the new epoch
    /// sees the layout too, and none made before is reused.
    fn new_epoch(&mut self) -> Result<()> {
        self.py_layouts += 1;
        self.py_epoch.set(0, self.py_layouts, 0).context("runtime layout epoch")
    }
}

impl JitSink for UnwindMaps {
    fn put_jit(&mut self, tgid: u32, p: &JitProc, code: Option<&JvmCode>) -> Result<()> {
        if let Some(code) = code {
            self.jvm_code
                .insert(tgid, code, 0)
                .with_context(|| format!("code cache of JVM {tgid}"))?;
        }
        self.jit.insert(tgid, p, 0).with_context(|| format!("JIT layout of process {tgid}"))?;
        self.new_epoch()
    }

    fn drop_jit(&mut self, tgid: u32) {
        let _ = self.jit.remove(&tgid);
        let _ = self.jvm_code.remove(&tgid);
    }
}

impl PySink for UnwindMaps {
    fn put_python(&mut self, tgid: u32, p: &PyProc) -> Result<()> {
        self.python
            .insert(tgid, p, 0)
            .with_context(|| format!("Python layout of process {tgid}"))?;
        self.new_epoch()
    }

    fn drop_python(&mut self, tgid: u32) {
        let _ = self.python.remove(&tgid);
    }
}
