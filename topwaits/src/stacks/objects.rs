//! The files mapped into traced processes (path, build id, where each segment
//! maps), gathered for formats that let other tools symbolize again (pprof).

use std::collections::HashMap;
use std::sync::Arc;

use crate::model::{ObjectMap, Record};
use crate::sys::procfs::Mapping;

/// Each process's mappings, with build ids read once per file. `maps_of` gives a
/// process's file mappings (kept from while it lived, or read now).
#[derive(Default)]
pub struct Objects {
    build_ids: HashMap<String, Option<Arc<str>>>,
    paths: HashMap<String, Arc<str>>,
}

impl Objects {
    /// The mappings of every process whose records have user frames.
    pub fn of_records(
        &mut self,
        records: &[Record],
        mut maps_of: impl FnMut(u32) -> Vec<Mapping>,
    ) -> HashMap<u32, Vec<ObjectMap>> {
        let mut out = HashMap::new();
        for r in records.iter().filter(|r| !r.user.frames().is_empty()) {
            if out.contains_key(&r.tgid) {
                continue;
            }
            // A container's files are read through its root (while it lives).
            let foreign = crate::sys::procfs::foreign_root(r.tgid);
            let maps = self.convert(r.tgid, foreign, maps_of(r.tgid));
            out.insert(r.tgid, maps);
        }
        out
    }

    fn convert(&mut self, tgid: u32, foreign: bool, mut maps: Vec<Mapping>) -> Vec<ObjectMap> {
        maps.sort_by_key(|m| m.start);
        maps.into_iter()
            .map(|m| {
                let file = crate::sys::procfs::path_in(tgid, foreign, &m.path)
                    .to_string_lossy()
                    .into_owned();
                let build_id = self
                    .build_ids
                    .entry(file.clone())
                    .or_insert_with(|| crate::stacks::symbolize::build_id_hex(&file).map(Arc::from))
                    .clone();
                let path = self
                    .paths
                    .entry(m.path.clone())
                    .or_insert_with(|| m.path.as_str().into())
                    .clone();
                ObjectMap { start: m.start, end: m.end, offset: m.offset, path, build_id }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::report;

    #[test]
    fn mappings_of_processes_with_user_frames_sorted_with_build_ids() {
        let exe = std::env::current_exe().unwrap().to_string_lossy().to_string();
        let maps = |tgid: u32| {
            assert_eq!(tgid, 100, "only the process with user frames is asked");
            vec![
                Mapping {
                    start: 0x5000,
                    end: 0x6000,
                    offset: 0x1000,
                    path: exe.clone(),
                    ..Default::default()
                },
                Mapping {
                    start: 0x1000,
                    end: 0x2000,
                    offset: 0,
                    path: "/nonexistent/lib.so".into(),
                    ..Default::default()
                },
            ]
        };
        let got = Objects::default().of_records(&report().records, maps);
        let m = &got[&100];
        assert_eq!(m.iter().map(|m| m.start).collect::<Vec<_>>(), [0x1000, 0x5000]);
        assert_eq!(m[0].build_id, None, "a file that cannot be read has none");
        // Rust test binaries are linked with a build id on Linux.
        let id = m[1].build_id.as_deref().expect("the test binary's build id");
        assert!(id.len() >= 16 && id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
        assert_eq!(crate::model::object_of(m, 0x5fff).map(|o| o.offset), Some(0x1000));
        assert_eq!(crate::model::object_of(m, 0x6000), None);
    }
}
