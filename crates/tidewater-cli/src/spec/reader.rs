//! Typed reads from a parsed TOML table that record every problem instead of
//! stopping at the first: a wrong type, a missing key, a bad value, an
//! unknown key (with the nearest valid name), a missing `${env:NAME}`.
//!
//! serde stops at the first error; a spec should report all of them in one
//! run, so components are read by hand through this.

use std::cell::RefCell;
use std::ops::Range;
use std::time::Duration;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::diagnostic::{Diagnostic, Diagnostics};

/// A string from the spec and where it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located<T> {
    /// The value (for strings: with `${env:NAME}` expanded).
    pub value: T,
    /// Its byte range in the file.
    pub span: Range<usize>,
}

/// Reads the keys of one table (`[sources.gen]`, say), remembering which
/// keys were asked for so that [`finish`](Self::finish) can name the rest.
pub struct Fields<'a, 'i> {
    /// `[sources.gen]`-style name for messages.
    pub name: String,
    table: &'a DeTable<'i>,
    span: Range<usize>,
    asked: RefCell<Vec<&'static str>>,
    all_known: std::cell::Cell<bool>,
    diags: &'a RefCell<Diagnostics>,
    env: &'a dyn Fn(&str) -> Option<String>,
}

impl<'a, 'i> Fields<'a, 'i> {
    /// Reads `table`, found at `span`, reporting into `diags`.
    pub fn new(
        name: String,
        table: &'a DeTable<'i>,
        span: Range<usize>,
        diags: &'a RefCell<Diagnostics>,
        env: &'a dyn Fn(&str) -> Option<String>,
    ) -> Self {
        Fields {
            name,
            table,
            span,
            asked: RefCell::new(Vec::new()),
            all_known: std::cell::Cell::new(false),
            diags,
            env,
        }
    }

    /// Where the table is.
    pub fn span(&self) -> Range<usize> {
        self.span.clone()
    }

    /// Records a problem.
    pub fn report(&self, diagnostic: Diagnostic) {
        self.diags.borrow_mut().push(diagnostic);
    }

    fn raw(&self, key: &'static str) -> Option<&'a Spanned<DeValue<'i>>> {
        self.asked.borrow_mut().push(key);
        self.table
            .iter()
            .find(|(k, _)| k.get_ref().as_ref() == key)
            .map(|(_, v)| v)
    }

    /// Whether the key is present (and marks it as known).
    pub fn has(&self, key: &'static str) -> bool {
        self.raw(key).is_some()
    }

    fn wrong_type(&self, key: &str, value: &Spanned<DeValue<'_>>, expected: &str) {
        self.report(Diagnostic::at(
            value.span(),
            format!(
                "`{key}` in {} must be {expected}, not {}",
                self.name,
                describe(value.get_ref())
            ),
        ));
    }

    /// Reports a key that must be there and is not.
    pub fn missing(&self, key: &str, expected: &str) {
        self.report(
            Diagnostic::at(
                self.span.clone(),
                format!("{} is missing `{key}` ({expected})", self.name),
            )
            .help(format!("add `{key} = ...` to {}", self.name)),
        );
    }

    /// An optional string, `${env:NAME}` expanded.
    pub fn string(&self, key: &'static str) -> Option<Located<String>> {
        let value = self.raw(key)?;
        match value.get_ref() {
            DeValue::String(s) => {
                let expanded = self.expand(key, s, value.span())?;
                Some(Located {
                    value: expanded,
                    span: value.span(),
                })
            }
            _ => {
                self.wrong_type(key, value, "a string");
                None
            }
        }
    }

    /// A string that must be present.
    pub fn required_string(&self, key: &'static str, expected: &str) -> Option<Located<String>> {
        if !self.has(key) {
            self.missing(key, expected);
            return None;
        }
        self.string(key)
    }

    /// An optional `true` or `false`.
    pub fn boolean(&self, key: &'static str) -> Option<bool> {
        let value = self.raw(key)?;
        match value.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            _ => {
                self.wrong_type(key, value, "true or false");
                None
            }
        }
    }

    /// An optional whole number of at least `min`.
    pub fn integer(&self, key: &'static str, min: u64) -> Option<Located<u64>> {
        let value = self.raw(key)?;
        let DeValue::Integer(i) = value.get_ref() else {
            self.wrong_type(key, value, "a whole number");
            return None;
        };
        match whole(i) {
            Some(n) if n >= 0 && n as u64 >= min => Some(Located {
                value: n as u64,
                span: value.span(),
            }),
            _ => {
                self.report(Diagnostic::at(
                    value.span(),
                    format!("`{key}` in {} must be at least {min}", self.name),
                ));
                None
            }
        }
    }

    /// An optional number (whole or not), above zero.
    pub fn positive_number(&self, key: &'static str) -> Option<Located<f64>> {
        let value = self.raw(key)?;
        let n = match value.get_ref() {
            DeValue::Integer(i) => whole(i).map(|n| n as f64),
            DeValue::Float(f) => f.as_str().replace('_', "").parse::<f64>().ok(),
            _ => {
                self.wrong_type(key, value, "a number");
                return None;
            }
        };
        match n {
            Some(n) if n.is_finite() && n > 0.0 => Some(Located {
                value: n,
                span: value.span(),
            }),
            _ => {
                self.report(Diagnostic::at(
                    value.span(),
                    format!("`{key}` in {} must be a number above zero", self.name),
                ));
                None
            }
        }
    }

    /// An optional duration such as `"500ms"`, `"2s"` or `"1h"`; with
    /// `allow_off`, `"off"` reads as `Some(None)`.
    pub fn duration(&self, key: &'static str, allow_off: bool) -> Option<Option<Duration>> {
        let text = self.string(key)?;
        if allow_off && text.value.eq_ignore_ascii_case("off") {
            return Some(None);
        }
        match humantime::parse_duration(&text.value) {
            Ok(d) if !d.is_zero() => Some(Some(d)),
            Ok(_) => {
                self.report(Diagnostic::at(
                    text.span,
                    format!(
                        "`{key}` in {} must be above zero{}",
                        self.name,
                        if allow_off {
                            "; use \"off\" to disable"
                        } else {
                            ""
                        }
                    ),
                ));
                None
            }
            Err(_) => {
                self.report(Diagnostic::at(
                    text.span,
                    format!(
                        "`{key}` in {}: '{}' is not a duration like \"500ms\", \"2s\" or \"1h\"{}",
                        self.name,
                        text.value,
                        if allow_off { ", nor \"off\"" } else { "" }
                    ),
                ));
                None
            }
        }
    }

    /// An optional size such as `"128MiB"` (or a whole number of bytes).
    pub fn size(&self, key: &'static str) -> Option<u64> {
        let value = self.raw(key)?;
        if matches!(value.get_ref(), DeValue::Integer(_)) {
            return self.integer(key, 1).map(|n| n.value);
        }
        let text = self.string(key)?;
        match crate::runner::parse_size(&text.value) {
            Ok(n) => Some(n),
            Err(e) => {
                self.report(Diagnostic::at(
                    text.span,
                    format!("`{key}` in {}: {e}", self.name),
                ));
                None
            }
        }
    }

    /// An optional list of strings.
    pub fn string_list(&self, key: &'static str) -> Option<Vec<Located<String>>> {
        let value = self.raw(key)?;
        let DeValue::Array(items) = value.get_ref() else {
            self.wrong_type(key, value, "a list of strings, like [\"a\", \"b\"]");
            return None;
        };
        let mut out = Vec::new();
        for item in items.iter() {
            match item.get_ref() {
                DeValue::String(s) => {
                    if let Some(v) = self.expand(key, s, item.span()) {
                        out.push(Located {
                            value: v,
                            span: item.span(),
                        });
                    }
                }
                _ => self.wrong_type(key, item, "a string (in a list of strings)"),
            }
        }
        Some(out)
    }

    /// A string or a list of strings (`key = "id"`, `key = ["a", "b"]`).
    pub fn string_or_list(&self, key: &'static str) -> Option<Vec<Located<String>>> {
        let value = self.raw(key)?;
        match value.get_ref() {
            DeValue::String(_) => self.string(key).map(|one| vec![one]),
            DeValue::Array(_) => self.string_list(key),
            _ => {
                self.wrong_type(
                    key,
                    value,
                    "a column name or a list of them, like [\"a\", \"b\"]",
                );
                None
            }
        }
    }

    /// An optional table of strings (`columns = { w = "v * 2.0" }`), in
    /// file order: `(key, value)` with the value's location.
    pub fn string_table(&self, key: &'static str) -> Option<Vec<(String, Located<String>)>> {
        let value = self.raw(key)?;
        let DeValue::Table(table) = value.get_ref() else {
            self.wrong_type(key, value, "a table of strings, like { name = \"...\" }");
            return None;
        };
        let mut out = Vec::new();
        for (k, v) in table.iter() {
            match v.get_ref() {
                DeValue::String(s) => {
                    if let Some(text) = self.expand(key, s, v.span()) {
                        out.push((
                            k.get_ref().to_string(),
                            Located {
                                value: text,
                                span: v.span(),
                            },
                        ));
                    }
                }
                _ => self.wrong_type(key, v, "a string"),
            }
        }
        Some(out)
    }

    /// An optional sub-table, read the same way.
    pub fn table(&self, key: &'static str) -> Option<Fields<'a, 'i>> {
        let value = self.raw(key)?;
        let DeValue::Table(table) = value.get_ref() else {
            self.wrong_type(key, value, "a table");
            return None;
        };
        let name = if self.name == "the spec" {
            format!("[{key}]")
        } else {
            format!("`{key}` of {}", self.name)
        };
        Some(Fields::new(name, table, value.span(), self.diags, self.env))
    }

    /// An optional string that must be one of `choices`.
    pub fn choice(&self, key: &'static str, choices: &[&'static str]) -> Option<Located<String>> {
        let text = self.string(key)?;
        if choices.contains(&text.value.as_str()) {
            return Some(text);
        }
        let mut d = Diagnostic::at(
            text.span.clone(),
            format!(
                "`{key}` in {} is \"{}\"; expected one of {}",
                self.name,
                text.value,
                quoted(choices)
            ),
        );
        if let Some(near) = nearest(&text.value, choices.iter().copied()) {
            d = d.help(format!("did you mean \"{near}\"?"));
        }
        self.report(d);
        None
    }

    /// Every entry, in file order (all of them count as known): for tables
    /// whose keys are ids, like `[sources]`.
    pub fn entries(
        &self,
    ) -> Vec<(
        &'a Spanned<toml::de::DeString<'i>>,
        &'a Spanned<DeValue<'i>>,
    )> {
        self.all_known.set(true);
        self.table.iter().collect()
    }

    /// Takes every key as known (when the table cannot be judged at all).
    pub fn accept_all(&self) {
        self.all_known.set(true);
    }

    /// Reports every key that was never asked for, naming the nearest that was.
    pub fn finish(&self) {
        if self.all_known.get() {
            return;
        }
        let mut asked = self.asked.borrow().clone();
        asked.sort_unstable();
        asked.dedup();
        for (key, _) in self.table.iter() {
            let name = key.get_ref().as_ref();
            if asked.contains(&name) {
                continue;
            }
            let mut d =
                Diagnostic::at(key.span(), format!("unknown key `{name}` in {}", self.name));
            d = match nearest(name, asked.iter().copied()) {
                Some(near) => d.help(format!("did you mean `{near}`?")),
                None => d.help(format!("the keys here are {}", quoted(&asked))),
            };
            self.diags.borrow_mut().push(d);
        }
    }

    /// Expands `${env:NAME}` in a string value.
    fn expand(&self, key: &str, text: &str, span: Range<usize>) -> Option<String> {
        match expand_env(text, self.env) {
            Ok(s) => Some(s),
            Err(problem) => {
                self.report(
                    Diagnostic::at(span, format!("`{key}` in {}: {problem}", self.name))
                        .help("set the variable in the environment that runs tidewater"),
                );
                None
            }
        }
    }
}

/// Replaces each `${env:NAME}` with the variable's value.
pub fn expand_env(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${env:") {
        out.push_str(&rest[..start]);
        let after = &rest[start + "${env:".len()..];
        let Some(end) = after.find('}') else {
            return Err("`${env:` is not closed with `}`".to_string());
        };
        let name = &after[..end];
        if name.is_empty() {
            return Err("`${env:}` names no variable".to_string());
        }
        match env(name) {
            Some(value) => out.push_str(&value),
            None => return Err(format!("environment variable {name} is not set")),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The candidate closest to `word`, if any is close enough to be a typo.
pub fn nearest<'c>(word: &str, candidates: impl Iterator<Item = &'c str>) -> Option<&'c str> {
    candidates
        .map(|c| (strsim::jaro_winkler(word, c), c))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// `"a", "b" or "c"` / `` `a`, `b` ``: names for messages.
pub fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A TOML integer's value (`None` beyond i64).
fn whole(i: &toml::de::DeInteger<'_>) -> Option<i64> {
    i64::from_str_radix(&i.as_str().replace('_', ""), i.radix()).ok()
}

/// What a TOML value is, for "must be X, not Y".
fn describe(value: &DeValue<'_>) -> String {
    match value {
        DeValue::String(s) => format!("the string \"{s}\""),
        DeValue::Integer(i) => format!("the number {}", i.as_str()),
        DeValue::Float(f) => format!("the number {}", f.as_str()),
        DeValue::Boolean(b) => format!("the boolean {b}"),
        DeValue::Datetime(_) => "a date-time".to_string(),
        DeValue::Array(_) => "a list".to_string(),
        DeValue::Table(_) => "a table".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "PGPASSWORD").then(|| "s3cret".to_string())
    }

    #[test]
    fn env_references_expand_and_a_missing_one_is_named() {
        assert_eq!(
            expand_env("postgres://u:${env:PGPASSWORD}@h/db", &env).unwrap(),
            "postgres://u:s3cret@h/db"
        );
        assert_eq!(expand_env("no refs", &env).unwrap(), "no refs");
        let e = expand_env("x ${env:NOPE} y", &env).unwrap_err();
        assert!(e.contains("NOPE is not set"), "{e}");
        assert!(
            expand_env("${env:OPEN", &env)
                .unwrap_err()
                .contains("not closed")
        );
        assert!(
            expand_env("${env:}", &env)
                .unwrap_err()
                .contains("no variable")
        );
    }

    #[test]
    fn typos_find_their_nearest_name() {
        let keys = ["checkpoint_interval", "parallelism", "state", "name"];
        assert_eq!(nearest("paralelism", keys.into_iter()), Some("parallelism"));
        assert_eq!(
            nearest("checkpoint_intervall", keys.into_iter()),
            Some("checkpoint_interval")
        );
        assert_eq!(nearest("zzz", keys.into_iter()), None);
    }
}
