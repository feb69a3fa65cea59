//! Go programs: their code named from Go's own function table (`pclntab`),
//! which every Go binary keeps, stripped or not, and what unwinding it needs
//! (the frame size at every pc, and the functions that begin a goroutine's or
//! a thread's stack; `cfi::gorows` makes the rules).

pub mod parked;
pub mod pclntab;
pub mod runtime;

use std::io::{Read, Seek};

use anyhow::Result;

use crate::sys::elf;
pub use pclntab::Pclntab;

/// The functions at the bottom of a Go stack: a goroutine's first frame
/// returns into `goexit`; a thread's system stack starts in `mstart` (or
/// `rt0_go` for the first); `mcall`, `morestack` and `systemstack_switch` are
/// where a goroutine's stack was left for the system stack, whose frames go no
/// further. Their names have held from Go 1.4 on.
const FIRST_FRAMES: &[&str] = &[
    "runtime.goexit",
    "runtime.mstart",
    "runtime.rt0_go",
    "runtime.mcall",
    "runtime.morestack",
    "runtime.systemstack_switch",
];

/// The function table of an ELF file, if it is a Go program (it has a
/// `.gopclntab`).
pub fn pclntab_of<R: Read + Seek>(f: &mut R) -> Result<Option<Pclntab>> {
    let Some(data) = elf::section_bytes(f, ".gopclntab")? else { return Ok(None) };
    let text = elf::section_addr(f, ".text")?.unwrap_or(0);
    Pclntab::parse(data, text).map(Some)
}

/// Whether a function named `name` begins a stack (see [`FIRST_FRAMES`]).
pub fn is_first_frame(name: &str) -> bool {
    FIRST_FRAMES.contains(&name)
}

/// A Go function's name for the frame at `pc` (a return address unless
/// `leaf`), with its file and line where the pc is in the function's own code.
pub fn name_at(tab: &Pclntab, pc: u64, leaf: bool) -> Option<String> {
    let at = if leaf { pc } else { pc.checked_sub(1)? };
    let f = tab.func_at(at)?;
    let name = tab.name(f)?;
    Some(match tab.line(f, at) {
        Some((file, line)) => {
            format!("{name} ({}:{line})", file.rsplit('/').next().unwrap_or(file))
        }
        None => name.to_string(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A Go program built here (when `go` is installed), stripped as
    /// distributions ship them: its table names `main.work` and the runtime's
    /// functions, at the addresses its symbol table had before stripping.
    pub(crate) fn go_program(tag: &str) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
        let dir = std::env::temp_dir().join(format!("tw-go-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        std::fs::write(dir.join("go.mod"), "module twgo\ngo 1.18\n").ok()?;
        let src = "package main\n\n//go:noinline\nfunc work(n int) int {\n\tif n > 0 {\n\t\treturn work(n-1) + 1\n\t}\n\treturn 0\n}\n\nfunc main() { println(work(3)) }\n";
        std::fs::write(dir.join("main.go"), src).ok()?;
        let out = std::process::Command::new("go")
            .args(["build", "-o", "prog", "."])
            .current_dir(&dir)
            .env("GOFLAGS", "-mod=mod")
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        let stripped = dir.join("prog-stripped");
        let ok = std::process::Command::new("strip")
            .arg("-o")
            .arg(&stripped)
            .arg(dir.join("prog"))
            .status()
            .ok()?
            .success();
        ok.then(|| (dir.join("prog"), stripped))
    }

    /// The address of `name` in the ELF file at `path` (from `nm`).
    pub(crate) fn nm(path: &std::path::Path, name: &str) -> Option<u64> {
        let out = std::process::Command::new("nm").arg(path).output().ok()?;
        String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
            let mut it = l.split_whitespace();
            let (addr, _, n) = (it.next()?, it.next()?, it.next()?);
            (n == name).then(|| u64::from_str_radix(addr, 16).ok())?
        })
    }

    #[test]
    fn a_stripped_go_program_is_named_from_its_own_table() {
        let Some((full, stripped)) = go_program("names") else {
            eprintln!("skipped: no Go toolchain (apt golang-go)");
            return;
        };
        let tab = pclntab_of(&mut std::fs::File::open(&stripped).unwrap())
            .unwrap()
            .expect("a Go program has its table");
        assert!(tab.len() > 1000, "{} functions", tab.len());
        let work = nm(&full, "main.work").expect("main.work in the unstripped symbol table");
        let f = tab.func_at(work + 4).expect("main.work in the table");
        assert_eq!((f.entry, tab.name(f)), (work, Some("main.work")));
        let named = name_at(&tab, work + 4, true).unwrap();
        assert!(named.starts_with("main.work (main.go:"), "{named}");
        // Every function of the symbol table is one of the table's, same entry.
        let goexit = nm(&full, "runtime.goexit.abi0")
            .or_else(|| nm(&full, "runtime.goexit"))
            .expect("runtime.goexit");
        assert_eq!(tab.func_at(goexit).map(|f| f.entry), Some(goexit));
        let _ = std::fs::remove_dir_all(full.parent().unwrap());
    }
}
