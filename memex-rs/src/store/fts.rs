//! What goes into the FTS5 index (how queries are read is `search::query`).
//!
//! FTS5's `unicode61` tokenizer treats a run of Chinese or Japanese characters as one token,
//! so `认证` would never match inside `修复认证失败`. Instead of paying for a trigram index over
//! all text (5x slower, 2.3x larger, PERF-NOTES.md), the indexed text expands every CJK run into
//! its overlapping bigrams plus its last character (`修复认证` → `修复 复认 认证 证`), and a CJK
//! query word becomes the phrase of its bigrams. Latin text is indexed as it is.

/// Whether `c` belongs to a script written without spaces between words.
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // Hiragana, Katakana
        | 0x3400..=0x4DBF    // CJK Extension A
        | 0x4E00..=0x9FFF    // CJK Unified Ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF    // CJK Compatibility Ideographs
        | 0x20000..=0x2FA1F) // Extensions B–F, compatibility supplement
}

/// The text to index for `text`, at most about `max_bytes` of it. Borrows when there is no CJK.
pub fn index_text(text: &str, max_bytes: usize) -> std::borrow::Cow<'_, str> {
    let text = if text.len() > max_bytes {
        let mut end = max_bytes;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        &text[..end]
    } else {
        text
    };
    if !text.chars().any(is_cjk) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() * 3);
    let mut run: Vec<char> = Vec::new();
    let flush = |run: &mut Vec<char>, out: &mut String| {
        if run.is_empty() {
            return;
        }
        out.push(' ');
        for w in run.windows(2) {
            out.push(w[0]);
            out.push(w[1]);
            out.push(' ');
        }
        out.push(*run.last().unwrap());
        out.push(' ');
        run.clear();
    };
    for c in text.chars() {
        if is_cjk(c) {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cjk_runs_become_bigrams() {
        assert_eq!(
            index_text("修复认证bug", 1000).trim(),
            "修复 复认 认证 证 bug"
        );
        assert_eq!(index_text("plain text", 1000), "plain text");
    }
}
