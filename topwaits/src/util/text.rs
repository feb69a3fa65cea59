//! Small text helpers the reports share.

/// `N record` or `N records`.
pub fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

#[cfg(test)]
mod tests {
    use super::plural;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(plural(1, "record"), "1 record");
        assert_eq!(plural(0, "record"), "0 records");
        assert_eq!(plural(2, "more record"), "2 more records");
    }
}
