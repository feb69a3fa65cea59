//! The JIT runtimes of traced processes, for the walker: each V8 or HotSpot
//! process's entry in its map (the [`Tracker`]), and the same entry for walks
//! made in user space ([`Procs`]).

use std::collections::HashMap;

use anyhow::Result;
use topwaits_common::jit::{JitProc, JvmCode};

use crate::stacks::{hotspot, v8};
use crate::sys::procfs::{self, Mapping};

/// Where the walker's JIT layouts go.
pub trait JitSink {
    /// A process's entry, with a JVM's code cache.
    fn put_jit(&mut self, tgid: u32, p: &JitProc, code: Option<&JvmCode>) -> Result<()>;
    fn drop_jit(&mut self, tgid: u32);
}

/// What each runtime's files hold, read once per file.
#[derive(Default)]
struct Files {
    v8: HashMap<(u64, u64), Option<v8::V8File>>,
    jvm: hotspot::Jvms,
}

impl Files {
    /// The walker's entry for process `tgid` mapping `maps`, if it runs V8 or
    /// a HotSpot JVM whose interpreter is in place.
    fn proc_of(&mut self, tgid: u32, maps: &[Mapping]) -> Option<(JitProc, Option<JvmCode>)> {
        match v8::proc_of(&mut self.v8, tgid, maps) {
            Some(p) => Some((p, None)),
            None => self.jvm.proc_of(tgid, maps).map(|(p, c)| (p, Some(c))),
        }
    }
}

/// The walker's entry for process `tgid`, from its mappings now (for walks
/// made in user space), each file read once.
#[derive(Default)]
pub struct Procs {
    files: Files,
    procs: HashMap<u32, Option<(JitProc, Option<JvmCode>)>>,
}

impl Procs {
    pub fn of(&mut self, tgid: u32) -> Option<(JitProc, Option<JvmCode>)> {
        let files = &mut self.files;
        *self.procs.entry(tgid).or_insert_with(|| files.proc_of(tgid, &procfs::maps_of(tgid)))
    }
}

/// The traced processes' JIT runtimes, kept in the walker's map.
#[derive(Default)]
pub struct Tracker {
    files: Files,
    procs: HashMap<u32, (JitProc, Option<JvmCode>)>,
    /// HotSpot processes met since [`Tracker::take_jvms`] last took them.
    jvms: Vec<u32>,
}

impl Tracker {
    /// A process's mappings were read (first seen, exec, or code met in no
    /// mapping, as when V8 remaps its builtins or a JVM starts running Java).
    pub fn on_maps(&mut self, tgid: u32, maps: &[Mapping], sink: &mut dyn JitSink) {
        let Some(p) = self.files.proc_of(tgid, maps) else { return };
        if self.procs.get(&tgid) == Some(&p) {
            return;
        }
        match sink.put_jit(tgid, &p.0, p.1.as_ref()) {
            Ok(()) => {
                if self.procs.insert(tgid, p).is_none() && p.1.is_some() {
                    self.jvms.push(tgid);
                }
            }
            Err(e) => log::debug!("JIT layout of {tgid} not kept: {e:#}"),
        }
    }

    /// The HotSpot processes met since last asked (their JVM runs Java).
    pub fn take_jvms(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.jvms)
    }

    /// A process forked: the walker gave the child its parent's entry, which
    /// is kept here too so that the child's exec drops it.
    pub fn on_fork(&mut self, child: u32, parent: u32) {
        if let Some(p) = self.procs.get(&parent).copied() {
            self.procs.insert(child, p);
        }
    }

    /// A process replaced its image, or exited.
    pub fn forget(&mut self, tgid: u32, sink: &mut dyn JitSink) {
        self.files.jvm.forget(tgid);
        if self.procs.remove(&tgid).is_some() {
            sink.drop_jit(tgid);
        }
    }
}
