//! Hook: the `cgroup_attach_task` tracepoint (tp_btf and raw_tp), where a task
//! moves to another cgroup. With `--cgroup` it keeps the traced set: a thread
//! moved into the cgroup or below it is traced from then on, and one moved out
//! is not. Attached only then. A new task's own cgroup is read here too, for
//! the fork hook.

use aya_ebpf::{
    helpers::bpf_probe_read_kernel,
    macros::{btf_tracepoint, raw_tracepoint},
    programs::{BtfTracePointContext, RawTracePointContext},
};

use crate::maps::{set_member, settings, task_u32};

/// Reads a `T` at `base + off`, a field found in BTF (`u32::MAX`: unknown).
#[inline(always)]
fn field<T: Copy>(base: u64, off: u32) -> Option<T> {
    if base == 0 || off == u32::MAX {
        return None;
    }
    // SAFETY: bpf_probe_read_kernel checks the address and fails cleanly.
    unsafe { bpf_probe_read_kernel((base + off as u64) as *const T).ok() }
}

/// Whether cgroup `cgrp` is the traced one or lies below it; None when it is in
/// another hierarchy (a move there changes nothing here) or cannot be read.
#[inline(always)]
fn under_target(cgrp: u64) -> Option<bool> {
    let c = &settings().cgroup;
    let root: u64 = field(cgrp, c.off_root)?;
    let hierarchy: i32 = field(root, c.off_hierarchy_id)?;
    if hierarchy as u32 != c.hierarchy {
        return None;
    }
    let level: i32 = field(cgrp, c.off_level)?;
    if level < c.level as i32 {
        return Some(false);
    }
    let slot = c.off_ancestors.checked_add(c.level.checked_mul(8)?)?;
    let id: u64 = if c.ancestors_are_ids != 0 {
        field(cgrp, slot)?
    } else {
        let ancestor: u64 = field(cgrp, slot)?;
        let kn: u64 = field(ancestor, c.off_kn)?;
        field(kn, c.off_kn_id)?
    };
    Some(id == c.id)
}

/// Whether new task `task` is in the traced cgroup or below it, by its own
/// cgroup in the unified hierarchy; None when that cannot tell (the traced
/// cgroup is a v1 one, or the offsets are unknown): it then follows its parent.
#[inline(always)]
pub fn task_under_target(task: u64) -> Option<bool> {
    let c = &settings().cgroup;
    if c.hierarchy != 0 {
        return None;
    }
    let cset: u64 = field(task, c.off_task_cgroups)?;
    under_target(field(cset, c.off_dfl_cgrp)?)
}

#[inline(always)]
fn on_attach(cgrp: u64, task: u64) {
    let Some(tid) = task_u32(task, settings().task.pid) else { return };
    if let Some(inside) = under_target(cgrp) {
        set_member(tid, inside);
    }
}

#[btf_tracepoint(function = "cgroup_attach_task")]
pub fn cgroup_attach_task_btf(ctx: BtfTracePointContext) -> i32 {
    // cgroup_attach_task's arguments are (dst_cgrp, path, task, threadgroup).
    on_attach(ctx.arg(0), ctx.arg(2));
    0
}

#[raw_tracepoint(tracepoint = "cgroup_attach_task")]
pub fn cgroup_attach_task_raw(ctx: RawTracePointContext) -> i32 {
    // The same pointers as tp_btf's.
    on_attach(ctx.arg(0), ctx.arg(2));
    0
}
