//! Dotted version numbers (`580.159.04`, `2.28.9`): compared field by field as numbers.

use std::cmp::Ordering;

/// `535.104.05` < `580.65`; non-numeric fields compare as 0, missing fields as 0.
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    let parse = |s: &str| -> Vec<u64> {
        s.split(['.', '-', '+'])
            .map(|f| f.parse().unwrap_or(0))
            .collect()
    };
    let (a, b) = (parse(a), parse(b));
    for i in 0..a.len().max(b.len()) {
        let ord = a.get(i).unwrap_or(&0).cmp(b.get(i).unwrap_or(&0));
        if ord != Ordering::Equal {
            return ord;
        }
    }
    Ordering::Equal
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_not_lexical() {
        assert_eq!(compare_versions("535.104.05", "580.65"), Ordering::Less);
        assert_eq!(
            compare_versions("580.159.04", "580.65.06"),
            Ordering::Greater
        );
        assert_eq!(compare_versions("550", "550.0"), Ordering::Equal);
    }
}
