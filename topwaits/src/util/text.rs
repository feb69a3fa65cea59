//! Small text helpers the reports share.

/// `N record` or `N records`.
pub fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// `tid N`, or `goroutine N` for a goroutine's wait (see
/// `topwaits_common::golang`), or `goroutines` for goroutine waits kept by
/// stack (goid 0, see `Settings::go_merge_rows`).
pub fn tid_text(tid: u32) -> String {
    use topwaits_common::golang::{is_goroutine, GOID_MASK, GOROUTINE_TID};
    match tid {
        GOROUTINE_TID => "goroutines".to_string(),
        t if is_goroutine(t) => format!("goroutine {}", t & GOID_MASK),
        t => format!("tid {t}"),
    }
}

/// `n` waiting ids counted in words: `8 goroutines` when all are goroutines,
/// `8 threads` when none is, `8 threads and goroutines` when both are; `at
/// least` where goroutines kept by stack are among them (each such id stands
/// for one goroutine or more).
pub fn count_of<'a>(n: usize, tids: impl IntoIterator<Item = &'a u32>) -> String {
    use topwaits_common::golang::{is_goroutine, GOROUTINE_TID};
    let (mut goroutines, mut threads, mut merged) = (false, false, false);
    for &t in tids {
        match is_goroutine(t) {
            true => goroutines = true,
            false => threads = true,
        }
        merged |= t == GOROUTINE_TID;
    }
    let counted = match (goroutines, threads) {
        (true, false) if merged && n == 1 => return "goroutines".to_string(),
        (true, true) if n > 1 => format!("{n} threads and goroutines"),
        (true, false) => plural(n, "goroutine"),
        _ => plural(n, "thread"),
    };
    match merged {
        true => format!("at least {counted}"),
        false => counted,
    }
}

/// The family of a thread name: each number that follows a separator
/// written `#`, so that a pool's numbered threads (`worker-3`,
/// `pool-1-thread-7`, `kworker/0:1`) share one name; `python3` stays as it is.
pub fn thread_family(comm: &str) -> String {
    let mut out = String::with_capacity(comm.len());
    let mut after_separator = false;
    let mut in_number = false;
    for c in comm.chars() {
        if c.is_ascii_digit() && (after_separator || in_number) {
            if !in_number {
                out.push('#');
            }
            in_number = true;
            continue;
        }
        in_number = false;
        after_separator = matches!(c, '-' | '_' | ' ' | '#' | '/' | ':');
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{count_of, plural, thread_family, tid_text};

    #[test]
    fn goroutines_threads_and_both_are_counted_as_what_they_are() {
        let g = topwaits_common::golang::tid_of(3);
        assert_eq!(count_of(2, &[g, g + 1]), "2 goroutines");
        assert_eq!(count_of(1, &[g]), "1 goroutine");
        assert_eq!(count_of(2, &[g, 5]), "2 threads and goroutines");
        assert_eq!(count_of(2, &[4, 5]), "2 threads");
        assert_eq!(count_of(0, &[]), "0 threads");
        // Goroutines kept by stack are one id for many.
        let m = topwaits_common::golang::tid_of(0);
        assert_eq!(count_of(3, &[g, g + 1, m]), "at least 3 goroutines");
        assert_eq!(count_of(2, &[5, m]), "at least 2 threads and goroutines");
        assert_eq!(count_of(1, &[m]), "goroutines");
    }

    #[test]
    fn goroutines_are_named_as_goroutines_and_threads_by_tid() {
        assert_eq!(tid_text(42), "tid 42");
        assert_eq!(tid_text(topwaits_common::golang::tid_of(7)), "goroutine 7");
        assert_eq!(tid_text(topwaits_common::golang::tid_of(0)), "goroutines");
    }

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(plural(1, "record"), "1 record");
        assert_eq!(plural(0, "record"), "0 records");
        assert_eq!(plural(2, "more record"), "2 more records");
    }

    #[test]
    fn numbered_threads_of_a_pool_share_a_family() {
        assert_eq!(thread_family("worker-3"), "worker-#");
        assert_eq!(thread_family("pool-1-thread-12"), "pool-#-thread-#");
        assert_eq!(thread_family("kworker/0:1"), "kworker/#:#");
        assert_eq!(thread_family("G1 Conc#0"), "G1 Conc##");
        assert_eq!(thread_family("python3"), "python3");
        assert_eq!(thread_family("postgres"), "postgres");
        assert_eq!(thread_family("x2-9"), "x2-#");
    }
}
