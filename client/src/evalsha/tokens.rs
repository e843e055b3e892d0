//! Lua 5.1's tokens, as much as the scripts' analysis needs (`parts.rs`): names, keywords and
//! punctuation with where they stand; strings and numbers as opaque literals; comments and blanks left
//! out, so that nothing in a comment or a string reads as code.

/// What a token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Name,
    Keyword,
    Punct,
    /// A string or a number.
    Literal,
}

#[derive(Clone, Copy, Debug)]
pub struct Token<'a> {
    pub text: &'a str,
    pub kind: Kind,
    /// Its line (0-based) and column, and the line of its last character (a long string's may differ).
    pub line: usize,
    pub col: usize,
    pub end_line: usize,
}

impl Token<'_> {
    pub fn is(&self, text: &str) -> bool {
        self.kind != Kind::Literal && self.text == text
    }
}

const KEYWORDS: [&str; 21] = [
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "if", "in", "local", "nil",
    "not", "or", "repeat", "return", "then", "true", "until", "while",
];

const PUNCT: [&str; 10] = ["...", "..", "==", "~=", "<=", ">=", "::", "//", "<<", ">>"];

/// The level of the long bracket (`[[`, `[==[`) opening at `at`, if one does.
fn long_open(b: &[u8], at: usize) -> Option<usize> {
    if b.get(at) != Some(&b'[') {
        return None;
    }
    let level = b[at + 1..].iter().take_while(|&&c| c == b'=').count();
    (b.get(at + 1 + level) == Some(&b'[')).then_some(level)
}

/// The end (exclusive) of the long bracket of `level` that opens at `at`.
fn long_end(src: &str, at: usize, level: usize) -> Result<usize, String> {
    let close = format!("]{}]", "=".repeat(level));
    let body = at + level + 2;
    src[body..]
        .find(&close)
        .map(|i| body + i + close.len())
        .ok_or_else(|| format!("an unclosed long bracket at byte {at}"))
}

/// The tokens of `src` (a first line starting with `#`, as `#!lua name=...`, is skipped as Lua does).
pub fn tokens(src: &str) -> Result<Vec<Token<'_>>, String> {
    let b = src.as_bytes();
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(b.iter().enumerate().filter(|(_, &c)| c == b'\n').map(|(i, _)| i + 1))
        .collect();
    let line_of = |at: usize| line_starts.partition_point(|&s| s <= at) - 1;
    let mut out = Vec::new();
    let mut i = 0;
    if b.first() == Some(&b'#') {
        i = src.find('\n').unwrap_or(src.len());
    }
    while i < b.len() {
        let c = b[i];
        let start = i;
        let kind = if c.is_ascii_whitespace() {
            i += 1;
            continue;
        } else if src[i..].starts_with("--") {
            i = match long_open(b, i + 2) {
                Some(level) => long_end(src, i + 2, level)?,
                None => src[i..].find('\n').map_or(src.len(), |n| i + n),
            };
            continue;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            if KEYWORDS.contains(&&src[start..i]) {
                Kind::Keyword
            } else {
                Kind::Name
            }
        } else if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            // Digits, a point, an exponent and its sign, hexadecimal digits: 1e9, 0x1F, 2.5e-3.
            let hex = src[i..].starts_with("0x") || src[i..].starts_with("0X");
            i += 1;
            while i < b.len() {
                let d = b[i];
                let sign = (d == b'+' || d == b'-') && !hex && matches!(b[i - 1], b'e' | b'E');
                if !(d.is_ascii_alphanumeric() || d == b'.' || d == b'_' || sign) {
                    break;
                }
                i += 1;
            }
            Kind::Literal
        } else if c == b'"' || c == b'\'' {
            i += 1;
            loop {
                match b.get(i) {
                    None | Some(b'\n') => return Err(format!("an unclosed string at byte {start}")),
                    Some(b'\\') => i += 2,
                    Some(&q) if q == c => break,
                    Some(_) => i += 1,
                }
            }
            i += 1;
            Kind::Literal
        } else if let Some(level) = long_open(b, i) {
            i = long_end(src, i, level)?;
            Kind::Literal
        } else {
            i += PUNCT.iter().find(|p| src[i..].starts_with(*p)).map_or(1, |p| p.len());
            Kind::Punct
        };
        let line = line_of(start);
        out.push(Token {
            text: &src[start..i],
            kind,
            line,
            col: start - line_starts[line],
            end_line: line_of(i - 1),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(src: &str) -> Vec<&str> {
        tokens(src).unwrap().iter().map(|t| t.text).collect()
    }

    #[test]
    fn comments_and_strings_hide_what_they_hold() {
        let src = "#!lua name=x\nlocal a = \"b -- c\" .. 'd\\'e' -- f g\n--[==[ h\n]] i ]==] j [[ k\n]] l";
        assert_eq!(texts(src), ["local", "a", "=", "\"b -- c\"", "..", "'d\\'e'", "j", "[[ k\n]]", "l"]);
        let t = tokens(src).unwrap();
        assert_eq!((t[0].line, t[0].col), (1, 0));
        assert_eq!((t[7].line, t[7].end_line, t[8].line), (3, 4, 4));
        assert_eq!(t[1].kind, Kind::Name);
        assert_eq!(t[0].kind, Kind::Keyword);
    }

    #[test]
    fn numbers_are_one_literal() {
        assert_eq!(
            texts("x = 1e9 + 0x1F - 2.5e-3 .. a.b"),
            ["x", "=", "1e9", "+", "0x1F", "-", "2.5e-3", "..", "a", ".", "b"]
        );
        assert!(tokens("x = 'open").is_err());
    }
}
