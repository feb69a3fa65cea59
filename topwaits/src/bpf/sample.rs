//! The on-CPU sampler of `--on-cpu`: its perf event program attached to a
//! `cpu-clock` event on each online CPU, its bodies handed over as the hooks'
//! are, and its map drained into records of running time.

use anyhow::{anyhow, Context as _, Result};
use aya::maps::{HashMap as BpfHashMap, MapData};
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};
use aya::programs::PerfEvent;
use aya::Ebpf;
use topwaits_common::{names, SampleKey, SampleVal, WaitKey};

use super::attach::{hand_over, loaded, program};
use crate::model::RawRecord;

/// The sampling period of `hz` samples a second, in ns (the unit of `cpu-clock`).
pub fn period_ns(hz: u32) -> u64 {
    1_000_000_000 / u64::from(hz.max(1))
}

/// The sampler's body, as [`attach`] finds it.
pub(super) enum Body {
    /// Loaded with the hooks' programs and handed over already.
    Loaded,
    /// To load (with the attached program) and hand over: its quick version
    /// (user stacks by frame pointers until the full one is in place) or the
    /// full one.
    Load(&'static str),
}

/// Loads the attached program and the body it tail-calls, as `body` says, and
/// opens a `cpu-clock` event on every online CPU with the program attached,
/// ticking `on_cpu::OVERSAMPLE` times as fast as `hz`: the program keeps a
/// random one in that many ticks, so that samples come at `hz` on average.
pub(super) fn attach(ebpf: &mut Ebpf, hz: u32, body: Body) -> Result<()> {
    if let Body::Load(body) = body {
        for name in [names::PROG_SAMPLE, body] {
            let p: &mut PerfEvent = program(ebpf, name)?.try_into()?;
            loaded(p.load(), || format!("the on-CPU sampler ({name})"))?;
        }
        hand_over(ebpf, names::SAMPLE_IMPL, body)?;
    }
    let cpus = aya::util::online_cpus()
        .map_err(|(path, e)| anyhow!("cannot read the online CPUs from {path}: {e}"))?;
    let p: &mut PerfEvent = program(ebpf, names::PROG_SAMPLE)?.try_into()?;
    for cpu in cpus {
        p.attach(
            PerfEventConfig::Software(SoftwareEvent::CpuClock),
            PerfEventScope::AllProcessesOneCpu { cpu },
            SamplePolicy::Period(period_ns(hz) / u64::from(topwaits_common::on_cpu::OVERSAMPLE)),
            false,
        )
        .with_context(|| format!("failed to open the on-CPU sampling event on CPU {cpu}"))?;
    }
    Ok(())
}

/// One row of samples as a record of running time: `count` samples of
/// `period` ns each, the last at `last_ns`.
pub fn record(k: &SampleKey, v: &SampleVal, period: u64) -> RawRecord {
    let key = WaitKey {
        kstack: k.kstack,
        ustack: k.ustack,
        tgid: k.tgid,
        tid: k.tid,
        comm: k.comm,
        what: Default::default(),
    };
    RawRecord {
        on_cpu: true,
        ..super::drain::raw_record(&key, v.count.saturating_mul(period), v.count, period, v.last_ns)
    }
}

/// Every row of the sample map as records.
pub(super) fn drain(map: &aya::maps::Map, period: u64, out: &mut Vec<RawRecord>) -> Result<()> {
    super::batch::each(map, |k: &SampleKey, v: &SampleVal| out.push(record(k, v, period)))
        .context("failed to read the sample map")
}

/// Deletes every row of the sample map (after an interval's drain).
pub(super) fn clear(map: &mut aya::maps::Map) -> Result<()> {
    let mut m: BpfHashMap<&mut MapData, SampleKey, SampleVal> = BpfHashMap::try_from(map)?;
    let keys: Vec<SampleKey> = m.keys().filter_map(Result::ok).collect();
    for k in keys {
        let _ = m.remove(&k);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::StackId;

    #[test]
    fn a_row_of_samples_is_running_time_of_whole_periods() {
        assert_eq!(period_ns(99), 10_101_010);
        assert_eq!(period_ns(1000), 1_000_000);
        let k = SampleKey {
            kstack: 0,
            ustack: topwaits_common::STACK_STORED | 5,
            tgid: 3,
            tid: 4,
            comm: *b"spin\0\0\0\0\0\0\0\0\0\0\0\0",
        };
        let r = record(&k, &SampleVal { count: 7, last_ns: 900 }, 1_000_000);
        assert!(r.on_cpu);
        assert_eq!((r.total_ns, r.count, r.max_ns, r.max_end_mono), (7_000_000, 7, 1_000_000, 900));
        assert_eq!(
            (r.kstack, r.comm.as_slice()),
            (StackId::None, &b"spin"[..]),
            "a sample in user code has no kernel stack"
        );
    }
}
