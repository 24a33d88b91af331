//! A reader for the subset of protobuf's text format that descriptors use: messages
//! (`name { ... }`, `name: { ... }`, `name < ... >`), scalar fields (`name: value`), lists
//! (`name: [a, b]`, read as the field repeated), strings (single or double quotes, the usual
//! backslash escapes, adjacent strings joined), integers (decimal, `0x` hex, a leading `-`),
//! identifiers (enum values, `true`/`false`), `#` comments, and optional `,` / `;` between
//! fields. Floats are not read: no descriptor field is one.
//!
//! Written by hand rather than taken from a crate: the protobuf crates read text format only
//! into generated or reflected messages, which need the schema compiled first, and they do
//! not keep the line of every field, which each error here names. The reader knows no schema;
//! the caller checks field names and types and says what to write instead.

use crate::TopologyError;

/// One field as written, with the 1-based line it starts on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Field {
    pub name: String,
    pub line: usize,
    pub value: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Message(Message),
    Int(i64),
    Str(String),
    /// An enum value, `true`, `false`, or any other bare word.
    Ident(String),
}

impl Value {
    /// What the value is, for "expected ..., found ..." messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Message(_) => "a message { ... }",
            Value::Int(_) => "a number",
            Value::Str(_) => "a string",
            Value::Ident(_) => "a name",
        }
    }
}

/// The fields of one message, in the order written (a repeated field appears once per value).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Message {
    pub fields: Vec<Field>,
}

/// Bounds what a hostile file can make the reader do: nesting depth (recursion) and values.
const MAX_DEPTH: usize = 32;
const MAX_FIELDS: usize = 1 << 20;

/// Parses a whole document into its top-level message.
pub(crate) fn parse(text: &str, source_name: &str) -> Result<Message, TopologyError> {
    let mut p = Parser {
        src: text.as_bytes(),
        pos: 0,
        line: 1,
        source_name,
        count: 0,
    };
    let msg = p.fields(None, 0)?;
    Ok(msg)
}

struct Parser<'a> {
    src: &'a [u8],
    pos: usize,
    line: usize,
    source_name: &'a str,
    count: usize,
}

impl Parser<'_> {
    fn err(&self, line: usize, message: String) -> TopologyError {
        TopologyError::Syntax {
            source_name: self.source_name.to_string(),
            // At the end of the file the reader may stand on a line past the last one with
            // anything on it; point at that one instead.
            line: line.min(self.last_content_line()),
            message,
        }
    }

    /// The last line holding something other than blanks and comments (1 for none).
    fn last_content_line(&self) -> usize {
        String::from_utf8_lossy(self.src)
            .lines()
            .enumerate()
            .filter(|(_, l)| {
                let t = l.trim();
                !t.is_empty() && !t.starts_with('#')
            })
            .last()
            .map_or(1, |(i, _)| i + 1)
    }

    /// Skips blanks, newlines and `#` comments.
    fn skip_space(&mut self) {
        while let Some(&b) = self.src.get(self.pos) {
            match b {
                b'\n' => {
                    self.line += 1;
                    self.pos += 1;
                }
                b' ' | b'\t' | b'\r' => self.pos += 1,
                b'#' => {
                    while self.src.get(self.pos).is_some_and(|&c| c != b'\n') {
                        self.pos += 1;
                    }
                }
                _ => break,
            }
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_space();
        self.src.get(self.pos).copied()
    }

    /// The next token as text for messages ("end of file" at the end).
    fn shown(&mut self) -> String {
        match self.peek() {
            None => "the end of the file".into(),
            Some(_) => {
                let rest = &self.src[self.pos..];
                let n = rest
                    .iter()
                    .position(|b| b.is_ascii_whitespace())
                    .unwrap_or(rest.len())
                    .clamp(1, 24);
                format!("`{}`", String::from_utf8_lossy(&rest[..n]))
            }
        }
    }

    fn word(&mut self) -> Option<String> {
        self.skip_space();
        let start = self.pos;
        while self
            .src
            .get(self.pos)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'.')
        {
            self.pos += 1;
        }
        (self.pos > start).then(|| String::from_utf8_lossy(&self.src[start..self.pos]).into())
    }

    /// Fields until `close` (or the end of the file for the top level).
    fn fields(
        &mut self,
        close: Option<(u8, usize)>,
        depth: usize,
    ) -> Result<Message, TopologyError> {
        if depth > MAX_DEPTH {
            return Err(self.err(
                self.line,
                format!("messages nest more than {MAX_DEPTH} deep; no descriptor needs that"),
            ));
        }
        let mut msg = Message::default();
        loop {
            match (self.peek(), close) {
                (None, None) => return Ok(msg),
                (None, Some((c, open_line))) => {
                    return Err(self.err(
                        self.line,
                        format!(
                            "the file ends inside the message opened at line {open_line}; add the closing `{}`",
                            c as char
                        ),
                    ))
                }
                (Some(b), Some((c, _))) if b == c => {
                    self.pos += 1;
                    return Ok(msg);
                }
                (Some(b @ (b'}' | b'>')), _) => {
                    return Err(self.err(
                        self.line,
                        format!("`{}` closes no open message; remove it", b as char),
                    ))
                }
                _ => {}
            }
            let line = self.line;
            let Some(name) = self
                .word()
                .filter(|w| !w.starts_with(|c: char| c.is_ascii_digit()))
            else {
                let found = self.shown();
                return Err(self.err(
                    line,
                    format!("expected a field name, found {found}; write `name: value` or `name {{ ... }}`"),
                ));
            };
            let colon = self.peek() == Some(b':');
            if colon {
                self.pos += 1;
            }
            match self.peek() {
                Some(open @ (b'{' | b'<')) => {
                    let open_line = self.line;
                    self.pos += 1;
                    let close = if open == b'{' { b'}' } else { b'>' };
                    let inner = self.fields(Some((close, open_line)), depth + 1)?;
                    self.push(&mut msg, name, line, Value::Message(inner))?;
                }
                Some(b'[') if colon => {
                    self.pos += 1;
                    self.list(&mut msg, &name, line, depth)?;
                }
                _ if colon => {
                    let v = self.scalar(&name)?;
                    self.push(&mut msg, name, line, v)?;
                }
                _ => {
                    let found = self.shown();
                    return Err(self.err(
                        self.line,
                        format!("after `{name}` expected `:` or `{{`, found {found}; write `{name}: value` or `{name} {{ ... }}`"),
                    ));
                }
            }
            // Fields may be separated by `,` or `;`.
            if matches!(self.peek(), Some(b',' | b';')) {
                self.pos += 1;
            }
        }
    }

    fn push(
        &mut self,
        msg: &mut Message,
        name: String,
        line: usize,
        value: Value,
    ) -> Result<(), TopologyError> {
        self.count += 1;
        if self.count > MAX_FIELDS {
            return Err(self.err(
                line,
                format!("more than {MAX_FIELDS} values; no descriptor needs that"),
            ));
        }
        msg.fields.push(Field { name, line, value });
        Ok(())
    }

    /// `[v, v, ...]` after the `[`: each value becomes one occurrence of the field.
    fn list(
        &mut self,
        msg: &mut Message,
        name: &str,
        line: usize,
        depth: usize,
    ) -> Result<(), TopologyError> {
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            let item_line = self.line;
            let v = if matches!(self.peek(), Some(b'{' | b'<')) {
                let open = self.src[self.pos];
                self.pos += 1;
                let close = if open == b'{' { b'}' } else { b'>' };
                Value::Message(self.fields(Some((close, item_line)), depth + 1)?)
            } else {
                self.scalar(name)?
            };
            self.push(msg, name.to_string(), item_line, v)?;
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => {
                    let found = self.shown();
                    return Err(self.err(
                        self.line,
                        format!("in the list of `{name}` (line {line}) expected `,` or `]`, found {found}"),
                    ));
                }
            }
        }
    }

    fn scalar(&mut self, name: &str) -> Result<Value, TopologyError> {
        let line = self.line;
        match self.peek() {
            Some(b'"' | b'\'') => {
                let mut s = self.string()?;
                while matches!(self.peek(), Some(b'"' | b'\'')) {
                    s.push_str(&self.string()?);
                }
                Ok(Value::Str(s))
            }
            Some(b) if b == b'-' || b.is_ascii_digit() => {
                let neg = b == b'-';
                if neg {
                    self.pos += 1;
                }
                let digits = self.word().unwrap_or_default();
                let parsed = if let Some(hex) = digits
                    .strip_prefix("0x")
                    .or_else(|| digits.strip_prefix("0X"))
                {
                    i64::from_str_radix(hex, 16).ok()
                } else {
                    digits.parse::<i64>().ok()
                };
                let shown = format!("{}{digits}", if neg { "-" } else { "" });
                match parsed {
                    Some(n) => Ok(Value::Int(if neg { -n } else { n })),
                    None => Err(self.err(
                        line,
                        format!("`{name}` holds `{shown}`, which is not a whole number; write an integer such as 4"),
                    )),
                }
            }
            Some(_) => match self.word() {
                Some(w) => Ok(Value::Ident(w)),
                None => {
                    let found = self.shown();
                    Err(self.err(
                        line,
                        format!("`{name}:` has no value (found {found}); write `{name}: value`"),
                    ))
                }
            },
            None => Err(self.err(
                line,
                format!("the file ends after `{name}:`; give it a value"),
            )),
        }
    }

    /// A quoted string at `pos`, with C-style escapes (`\n`, `\t`, `\\`, `\"`, `\'`, `\xHH`,
    /// octal `\NNN`).
    fn string(&mut self) -> Result<String, TopologyError> {
        let line = self.line;
        let quote = self.src[self.pos];
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            let Some(&b) = self.src.get(self.pos) else {
                return Err(self.err(line, "a string is not closed; add the closing quote".into()));
            };
            self.pos += 1;
            match b {
                b'\n' => {
                    return Err(self.err(
                        line,
                        "a string runs past the end of its line; close it on the line it starts"
                            .into(),
                    ))
                }
                _ if b == quote => break,
                b'\\' => {
                    let Some(&e) = self.src.get(self.pos) else {
                        continue;
                    };
                    self.pos += 1;
                    match e {
                        b'n' => out.push(b'\n'),
                        b't' => out.push(b'\t'),
                        b'r' => out.push(b'\r'),
                        b'\\' | b'"' | b'\'' | b'?' => out.push(e),
                        b'x' => {
                            let hex: Vec<u8> = self.src[self.pos..]
                                .iter()
                                .take(2)
                                .take_while(|c| c.is_ascii_hexdigit())
                                .copied()
                                .collect();
                            self.pos += hex.len();
                            let v = u8::from_str_radix(std::str::from_utf8(&hex).unwrap_or(""), 16)
                                .map_err(|_| {
                                    self.err(line, "`\\x` needs hex digits after it".into())
                                })?;
                            out.push(v);
                        }
                        b'0'..=b'7' => {
                            let mut v: u32 = (e - b'0') as u32;
                            for _ in 0..2 {
                                match self.src.get(self.pos) {
                                    Some(&d @ b'0'..=b'7') => {
                                        v = v * 8 + (d - b'0') as u32;
                                        self.pos += 1;
                                    }
                                    _ => break,
                                }
                            }
                            out.push((v & 0xff) as u8);
                        }
                        _ => {
                            return Err(self.err(
                                line,
                                format!(
                                "unknown escape `\\{}` in a string; write `\\\\` for a backslash",
                                e as char
                            ),
                            ))
                        }
                    }
                }
                _ => out.push(b),
            }
        }
        String::from_utf8(out).map_err(|_| self.err(line, "a string is not valid UTF-8".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(m: &Message) -> Vec<&str> {
        m.fields.iter().map(|f| f.name.as_str()).collect()
    }

    #[test]
    fn messages_lists_scalars_and_comments() {
        let text = "# a comment\nouter {\n  dims: [ 8, 4 ], kinds: [LINE, RING]\n  s: 'a' \"b\"\n}\ninner: < n: -0x10; >\n";
        let m = parse(text, "x").unwrap();
        assert_eq!(names(&m), ["outer", "inner"]);
        let Value::Message(outer) = &m.fields[0].value else {
            panic!()
        };
        assert_eq!(names(outer), ["dims", "dims", "kinds", "kinds", "s"]);
        assert_eq!(outer.fields[1].value, Value::Int(4));
        assert_eq!(outer.fields[1].line, 3);
        assert_eq!(outer.fields[3].value, Value::Ident("RING".into()));
        assert_eq!(outer.fields[4].value, Value::Str("ab".into()));
        let Value::Message(inner) = &m.fields[1].value else {
            panic!()
        };
        assert_eq!(inner.fields[0].value, Value::Int(-16));
        assert_eq!(m.fields[1].line, 6);
    }

    #[test]
    fn errors_name_the_line() {
        for (text, line, says) in [
            ("a {\n b: 1\n", 2, "closing `}`"),
            ("a: 1\n}\n", 2, "closes no open message"),
            ("a 1\n", 1, "expected `:` or `{`"),
            ("a: \"x\n", 1, "past the end of its line"),
            ("a: [1 2]\n", 1, "expected `,` or `]`"),
            ("\n\na: 12x\n", 3, "not a whole number"),
        ] {
            let e = parse(text, "f.textproto").unwrap_err();
            assert_eq!(e.line(), Some(line), "{text:?}: {e}");
            assert!(e.to_string().contains(says), "{text:?}: {e}");
        }
    }

    #[test]
    fn deep_nesting_is_refused_not_a_stack_overflow() {
        let text = "a {".repeat(10_000);
        assert!(parse(&text, "x").unwrap_err().to_string().contains("nest"));
    }
}
