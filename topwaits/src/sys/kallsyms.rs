//! Finds the real symbol name of a kernel function in kallsyms, where the compiler
//! may have renamed it (`finish_task_switch.isra.0`), for the kprobe attach path.

use std::io::BufRead;

/// The kallsyms file.
pub const KALLSYMS: &str = "/proc/kallsyms";

/// Picks the attachable symbol for `func`: the exact name if present, otherwise a
/// compiler clone such as `func.isra.N`, `func.constprop.N` or `func.part.N`. A
/// `.cold` split is never chosen: it holds only the unlikely half of the function.
pub fn find_function<R: BufRead>(reader: R, func: &str) -> Option<String> {
    let mut clone: Option<String> = None;
    for line in reader.split(b'\n').map_while(Result::ok) {
        let line = String::from_utf8_lossy(&line);
        let mut cols = line.split_whitespace();
        let (Some(_addr), Some(kind), Some(name)) = (cols.next(), cols.next(), cols.next()) else {
            continue;
        };
        if !matches!(kind, "t" | "T") {
            continue;
        }
        if name == func {
            return Some(name.to_string());
        }
        let Some(suffix) = name.strip_prefix(func).and_then(|s| s.strip_prefix('.')) else {
            continue;
        };
        if suffix.split('.').any(|part| part == "cold") {
            continue;
        }
        if clone.is_none() {
            clone = Some(name.to_string());
        }
    }
    clone
}

/// Reads the running kernel's kallsyms.
pub fn find_function_in_sys(func: &str) -> std::io::Result<Option<String>> {
    let f = std::fs::File::open(KALLSYMS)?;
    Ok(find_function(std::io::BufReader::new(f), func))
}

/// Whether kallsyms text shows every address as zero: the kernel hides them from a
/// reader without CAP_SYSLOG (see `kernel.kptr_restrict`), and kernel frames then
/// cannot be named. Judged on the first lines; empty text counts as hidden.
pub fn addresses_hidden<R: BufRead>(reader: R) -> bool {
    for line in reader.lines().map_while(Result::ok).take(16) {
        if line
            .split_whitespace()
            .next()
            .and_then(|a| u64::from_str_radix(a, 16).ok())
            .is_some_and(|a| a != 0)
        {
            return false;
        }
    }
    true
}

/// Whether this process sees the running kernel's symbol addresses as zero (or
/// cannot read kallsyms at all).
pub fn addresses_hidden_in_sys() -> bool {
    match std::fs::File::open(KALLSYMS) {
        Ok(f) => addresses_hidden(std::io::BufReader::new(f)),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_addresses_are_all_zero() {
        assert!(addresses_hidden("0000000000000000 T _stext\n0000000000000000 t x\n".as_bytes()));
        assert!(!addresses_hidden(
            "0000000000000000 A fixed_percpu_data\nffffffff81000000 T _stext\n".as_bytes()
        ));
        assert!(addresses_hidden("".as_bytes()), "nothing readable is nothing named");
        assert!(addresses_hidden("garbage\n".as_bytes()));
    }

    #[test]
    fn prefers_the_exact_name() {
        let text = "ffff1 t finish_task_switch.isra.0\nffff2 T finish_task_switch\n";
        assert_eq!(
            find_function(text.as_bytes(), "finish_task_switch").as_deref(),
            Some("finish_task_switch")
        );
    }

    #[test]
    fn finds_an_isra_clone_and_never_a_cold_split() {
        let text = "ffff0 t finish_task_switch.cold\nffff0 t finish_task_switch.isra.0.cold\n\
                    ffff1 t finish_task_switch.isra.0\nffff2 t finish_task_switch_x\n";
        assert_eq!(
            find_function(text.as_bytes(), "finish_task_switch").as_deref(),
            Some("finish_task_switch.isra.0")
        );
    }

    #[test]
    fn ignores_data_symbols_names_that_merely_share_a_prefix_and_junk_lines() {
        let text = b"ffff d finish_task_switch\n\n garbage\nffff t finish_task_switch_extra\n\xff\xfe t x\n";
        assert_eq!(find_function(&text[..], "finish_task_switch"), None);
    }
}
