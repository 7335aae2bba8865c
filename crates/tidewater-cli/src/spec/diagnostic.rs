//! Problems found in a spec, each pointing at the place in the file.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

/// One problem in a spec: where, what, and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Byte range in the spec's text (`None`: the file as a whole).
    pub span: Option<Range<usize>>,
    /// What is wrong.
    pub message: String,
    /// What to do about it, when there is more to say than the message.
    pub help: Option<String>,
}

impl Diagnostic {
    /// A problem at `span`.
    pub fn at(span: Range<usize>, message: impl Into<String>) -> Self {
        Diagnostic {
            span: Some(span),
            message: message.into(),
            help: None,
        }
    }

    /// A problem with the file as a whole (no sink, say).
    pub fn whole_file(message: impl Into<String>) -> Self {
        Diagnostic {
            span: None,
            message: message.into(),
            help: None,
        }
    }

    /// Adds what to do.
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

/// The source of a spec: its name for messages and its text, to turn byte
/// offsets into lines and columns.
#[derive(Debug, Clone)]
pub struct SourceText {
    /// The file as the user named it.
    pub file: String,
    /// Its contents.
    pub text: Arc<str>,
}

impl SourceText {
    /// A spec read from `file`.
    pub fn new(file: impl Into<String>, text: impl Into<Arc<str>>) -> Self {
        SourceText {
            file: file.into(),
            text: text.into(),
        }
    }

    /// 1-based line and column (in characters) of byte `offset`.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text[..floor_char_boundary(&self.text, offset)];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        (line, before[line_start..].chars().count() + 1)
    }

    fn line_text(&self, line: usize) -> &str {
        self.text.lines().nth(line - 1).unwrap_or("")
    }
}

fn floor_char_boundary(text: &str, mut offset: usize) -> usize {
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

/// Every problem found in one spec, in file order, ready to print.
#[derive(Debug, Clone)]
pub struct Diagnostics {
    /// The spec they are about.
    pub source: SourceText,
    /// The problems.
    pub items: Vec<Diagnostic>,
}

impl Diagnostics {
    /// No problems yet.
    pub fn new(source: SourceText) -> Self {
        Diagnostics {
            source,
            items: Vec::new(),
        }
    }

    /// Records a problem.
    pub fn push(&mut self, diagnostic: Diagnostic) {
        self.items.push(diagnostic);
    }

    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The problems as `(line, column, message)`, for tests and machines.
    pub fn located(&self) -> Vec<(usize, usize, String)> {
        self.sorted()
            .into_iter()
            .map(|d| {
                let (line, col) = d
                    .span
                    .as_ref()
                    .map_or((0, 0), |s| self.source.line_col(s.start));
                (line, col, d.message.clone())
            })
            .collect()
    }

    fn sorted(&self) -> Vec<&Diagnostic> {
        let mut items: Vec<&Diagnostic> = self.items.iter().collect();
        items.sort_by_key(|d| d.span.as_ref().map_or(usize::MAX, |s| s.start));
        items
    }
}

impl fmt::Display for Diagnostics {
    /// rustc's shape: `file:line:col: message`, the line, a caret, the help.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = &self.source.file;
        for d in self.sorted() {
            match &d.span {
                Some(span) => {
                    let (line, col) = self.source.line_col(span.start);
                    writeln!(f, "error: {file}:{line}:{col}: {}", d.message)?;
                    let text = self.source.line_text(line);
                    let width = self.source.text[span.clone()]
                        .lines()
                        .next()
                        .map_or(1, |l| l.chars().count().max(1));
                    writeln!(f, "  {line:>4} | {text}")?;
                    writeln!(f, "       | {}{}", " ".repeat(col - 1), "^".repeat(width))?;
                }
                None => writeln!(f, "error: {file}: {}", d.message)?,
            }
            if let Some(help) = &d.help {
                writeln!(f, "       = help: {help}")?;
            }
        }
        let n = self.items.len();
        write!(
            f,
            "{n} problem{} in {file}; nothing was run",
            if n == 1 { "" } else { "s" }
        )
    }
}

impl std::error::Error for Diagnostics {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_lines_and_columns() {
        let source = SourceText::new("a.toml", "[job]\nname = \"é x\"\n");
        assert_eq!(source.line_col(0), (1, 1));
        assert_eq!(source.line_col(6), (2, 1));
        // The column counts characters, not bytes: 'x' follows a two-byte 'é'.
        let x = source.text.find('x').unwrap();
        assert_eq!(source.line_col(x), (2, 11));
    }

    #[test]
    fn every_problem_is_printed_in_file_order_with_its_line() {
        let source = SourceText::new("a.toml", "[job]\nnmae = 1\n[sinks]\n");
        let mut d = Diagnostics::new(source);
        d.push(Diagnostic::whole_file("the spec has no sink"));
        d.push(Diagnostic::at(6..10, "unknown key `nmae`").help("did you mean `name`?"));
        let text = d.to_string();
        assert!(
            text.starts_with("error: a.toml:2:1: unknown key `nmae`\n"),
            "{text}"
        );
        assert!(
            text.contains("     2 | nmae = 1\n       | ^^^^\n"),
            "{text}"
        );
        assert!(text.contains("= help: did you mean `name`?"), "{text}");
        assert!(
            text.contains("error: a.toml: the spec has no sink"),
            "{text}"
        );
        assert!(
            text.ends_with("2 problems in a.toml; nothing was run"),
            "{text}"
        );
    }
}
