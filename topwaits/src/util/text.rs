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
/// `topwaits_common::golang`).
pub fn tid_text(tid: u32) -> String {
    use topwaits_common::golang::{is_goroutine, GOID_MASK};
    if is_goroutine(tid) {
        format!("goroutine {}", tid & GOID_MASK)
    } else {
        format!("tid {tid}")
    }
}

/// What a set of waiting ids is called: `goroutine` when all are goroutines,
/// else `thread`.
pub fn thread_noun<'a>(tids: impl IntoIterator<Item = &'a u32>) -> &'static str {
    let mut tids = tids.into_iter().peekable();
    let any = tids.peek().is_some();
    if any && tids.all(|&t| topwaits_common::golang::is_goroutine(t)) {
        "goroutine"
    } else {
        "thread"
    }
}

#[cfg(test)]
mod tests {
    use super::{plural, thread_noun, tid_text};

    #[test]
    fn only_goroutines_are_called_goroutines() {
        let g = topwaits_common::golang::tid_of(3);
        assert_eq!(thread_noun(&[g, g + 1]), "goroutine");
        assert_eq!(thread_noun(&[g, 5]), "thread");
        assert_eq!(thread_noun(&[]), "thread");
    }

    #[test]
    fn goroutines_are_named_as_goroutines_and_threads_by_tid() {
        assert_eq!(tid_text(42), "tid 42");
        assert_eq!(tid_text(topwaits_common::golang::tid_of(7)), "goroutine 7");
    }

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(plural(1, "record"), "1 record");
        assert_eq!(plural(0, "record"), "0 records");
        assert_eq!(plural(2, "more record"), "2 more records");
    }
}
