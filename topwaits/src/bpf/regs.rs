//! The registers of every user task, read by the `task_regs` iterator: the
//! frame pointer of a thread blocked since before a trace, which `/proc` does
//! not show, so that its stack is unwound by every rule (see `cfi::now`).

use std::collections::HashMap;
use std::io::Read as _;

use anyhow::{anyhow, Context as _, Result};
use aya::programs::Iter;
use aya::{Btf, Ebpf};
use topwaits_common::{names, TaskRegs};

/// Runs the iterator of `ebpf` once (loading it the first time) and reads
/// every user task's registers, by thread id.
pub fn of_tasks(ebpf: &mut Ebpf, btf: &Btf) -> Result<HashMap<u32, TaskRegs>> {
    Ok(parse(&run_task_iterator(ebpf, names::PROG_TASK_REGS, btf, "the task registers iterator")?))
}

/// Runs the task iterator program `name` once, loading it the first time
/// (`what` names it in errors), and returns what it wrote.
pub(super) fn run_task_iterator(
    ebpf: &mut Ebpf,
    name: &str,
    btf: &Btf,
    what: &str,
) -> Result<Vec<u8>> {
    let prog: &mut Iter =
        ebpf.program_mut(name).ok_or_else(|| anyhow!("program {name} missing"))?.try_into()?;
    if prog.fd().is_err() {
        super::attach::loaded(prog.load("task", btf), || what.to_string())?;
    }
    let link = prog.attach().with_context(|| format!("failed to attach {what}"))?;
    let mut file =
        prog.take_link(link)?.into_file().with_context(|| format!("failed to open {what}"))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).with_context(|| format!("failed to read {what}"))?;
    Ok(bytes)
}

/// The records the iterator wrote, by thread id; a torn tail is left out.
fn parse(bytes: &[u8]) -> HashMap<u32, TaskRegs> {
    let size = size_of::<TaskRegs>();
    let word =
        |c: &[u8], at: usize| u64::from_ne_bytes(c[at..at + 8].try_into().unwrap_or_default());
    bytes
        .chunks_exact(size)
        .map(|c| {
            let half = |at: usize| u32::from_ne_bytes(c[at..at + 4].try_into().unwrap_or_default());
            TaskRegs {
                tid: half(0),
                tgid: half(4),
                ip: word(c, 8),
                sp: word(c, 16),
                bp: word(c, 24),
            }
        })
        .map(|r| (r.tid, r))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_read_by_thread_and_a_torn_tail_is_left_out() {
        let rec = |tid: u32, bp: u64| {
            let mut b = Vec::new();
            for w in [tid as u64 | (7u64 << 32), 0x401000, 0x7ffc_0000, bp] {
                b.extend_from_slice(&w.to_ne_bytes());
            }
            b
        };
        let mut bytes = rec(10, 0x7ffc_0040);
        bytes.extend(rec(11, 0x5eed));
        bytes.extend(&[1, 2, 3]);
        let got = parse(&bytes);
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[&10],
            TaskRegs { tid: 10, tgid: 7, ip: 0x401000, sp: 0x7ffc_0000, bp: 0x7ffc_0040 }
        );
        assert_eq!(got[&11].bp, 0x5eed);
    }
}
