//! Keys of any type PostgreSQL orders with a btree: how a key value is taken
//! from a batch, written into a query, and checkpointed, and how a table's key
//! space is cut into splits. Everything here is pure; the source does the I/O.
//!
//! Order is always the server's: split bounds come from a sample the server
//! sorted, and every comparison (`(a, b) > (x, y)`) runs on the server in the
//! columns' own collations. tidewater never compares two keys itself, so it
//! cannot disagree with the server about which comes first.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{
    Date32Type, Decimal128Type, Int16Type, Int32Type, Int64Type, TimestampMicrosecondType,
};
use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, TimeDelta};
use serde_json::{Value, json};

use crate::schema::{PgColumn, quote_ident};

/// How one key column's values are read, written and checkpointed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyKind {
    /// int2, int4, int8.
    Int,
    /// numeric with a declared scale (an undeclared one could round).
    Numeric {
        /// Digits after the point.
        scale: i8,
    },
    /// text, varchar, char: compared in the column's collation.
    Text,
    /// uuid.
    Uuid,
    /// date.
    Date,
    /// timestamp without time zone.
    Timestamp,
    /// timestamptz.
    TimestampTz,
}

/// One key column's value. Checkpointed exactly: integers, day and microsecond
/// counts as JSON numbers, numerics and text as strings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyValue {
    /// An integer.
    Int(i64),
    /// A numeric's mantissa at its column's scale.
    Numeric(i128),
    /// Text or a uuid's canonical text.
    Text(String),
    /// Days since 1970-01-01.
    Days(i32),
    /// Microseconds since 1970-01-01 00:00 (UTC for timestamptz).
    Micros(i64),
}

impl KeyKind {
    /// The kind of a key column, or why it cannot be a key.
    pub(crate) fn of(column: &PgColumn) -> Result<KeyKind, String> {
        use arrow::datatypes::DataType;
        Ok(match (column.udt.as_str(), &column.arrow) {
            ("int2" | "int4" | "int8", _) => KeyKind::Int,
            ("numeric", Some(DataType::Decimal128(_, scale))) if column.sql_type != "numeric" => {
                KeyKind::Numeric { scale: *scale }
            }
            ("numeric", _) => {
                return Err(format!(
                    "key column '{}' is numeric without a declared scale: its values could be \
                     rounded when read, and a rounded cursor skips or repeats rows; declare it \
                     numeric(precision, scale), or key by another column",
                    column.name
                ));
            }
            ("text" | "varchar" | "bpchar", _) => KeyKind::Text,
            ("uuid", _) => KeyKind::Uuid,
            ("date", _) => KeyKind::Date,
            ("timestamp", _) => KeyKind::Timestamp,
            ("timestamptz", _) => KeyKind::TimestampTz,
            _ => {
                return Err(format!(
                    "key column '{}' has type {}: a key must be an integer, numeric(p, s), \
                     uuid, text, varchar, date, timestamp or timestamptz column, or a list of them",
                    column.name, column.sql_type
                ));
            }
        })
    }

    /// The value at `row` of a column read for this key.
    pub(crate) fn value_at(self, array: &ArrayRef, row: usize) -> Result<KeyValue, String> {
        if array.is_null(row) {
            return Err("a key value is NULL".into());
        }
        use arrow::datatypes::DataType as T;
        Ok(match (self, array.data_type()) {
            (KeyKind::Int, T::Int16) => {
                KeyValue::Int(array.as_primitive::<Int16Type>().value(row).into())
            }
            (KeyKind::Int, T::Int32) => {
                KeyValue::Int(array.as_primitive::<Int32Type>().value(row).into())
            }
            (KeyKind::Int, T::Int64) => KeyValue::Int(array.as_primitive::<Int64Type>().value(row)),
            (KeyKind::Numeric { .. }, T::Decimal128(..)) => {
                KeyValue::Numeric(array.as_primitive::<Decimal128Type>().value(row))
            }
            (KeyKind::Text | KeyKind::Uuid, T::Utf8) => {
                KeyValue::Text(array.as_string::<i32>().value(row).to_string())
            }
            (KeyKind::Date, T::Date32) => {
                KeyValue::Days(array.as_primitive::<Date32Type>().value(row))
            }
            (KeyKind::Timestamp | KeyKind::TimestampTz, T::Timestamp(..)) => {
                KeyValue::Micros(array.as_primitive::<TimestampMicrosecondType>().value(row))
            }
            (kind, other) => return Err(format!("a {kind:?} key was read as {other}")),
        })
    }

    /// The value as checkpointed.
    pub(crate) fn to_json(self, value: &KeyValue) -> Value {
        match value {
            KeyValue::Int(v) => json!(v),
            KeyValue::Numeric(m) => json!(self.decimal_text(*m)),
            KeyValue::Text(s) => json!(s),
            KeyValue::Days(d) => json!(d),
            KeyValue::Micros(us) => json!(us),
        }
    }

    /// A checkpointed value back, or `None` when it is not one of this kind.
    pub(crate) fn read_json(self, value: &Value) -> Option<KeyValue> {
        Some(match self {
            KeyKind::Int => KeyValue::Int(value.as_i64()?),
            KeyKind::Numeric { scale } => KeyValue::Numeric(parse_decimal(value.as_str()?, scale)?),
            KeyKind::Text | KeyKind::Uuid => KeyValue::Text(value.as_str()?.to_string()),
            KeyKind::Date => KeyValue::Days(i32::try_from(value.as_i64()?).ok()?),
            KeyKind::Timestamp | KeyKind::TimestampTz => KeyValue::Micros(value.as_i64()?),
        })
    }

    /// The value as a SQL literal the server reads as the column's type. Only
    /// integers are bare; the rest are quoted and untyped, so the comparison
    /// takes the column's type and collation.
    pub(crate) fn literal(self, value: &KeyValue) -> Result<String, String> {
        Ok(match value {
            KeyValue::Int(v) => v.to_string(),
            KeyValue::Numeric(m) => format!("'{}'", self.decimal_text(*m)),
            KeyValue::Text(s) => quote_literal(s),
            KeyValue::Days(days) => {
                let date = NaiveDate::from_ymd_opt(1970, 1, 1)
                    .and_then(|e| e.checked_add_signed(TimeDelta::days((*days).into())))
                    .ok_or_else(|| format!("the date {days} days from 1970 is out of range"))?;
                format!(
                    "'{}'",
                    with_era(&date.format("%m-%d").to_string(), date.year(), "")
                )
            }
            KeyValue::Micros(us) => {
                let at: NaiveDateTime = DateTime::from_timestamp_micros(*us)
                    .ok_or_else(|| format!("the timestamp {us} µs from 1970 is out of range"))?
                    .naive_utc();
                let zone = if self == KeyKind::TimestampTz {
                    "+00"
                } else {
                    ""
                };
                let rest = at.format("%m-%d %H:%M:%S%.6f").to_string();
                format!("'{}'", with_era(&rest, at.year(), zone))
            }
        })
    }

    fn decimal_text(self, mantissa: i128) -> String {
        let scale = match self {
            KeyKind::Numeric { scale } => scale.max(0) as usize,
            _ => 0,
        };
        let digits = mantissa.unsigned_abs().to_string();
        let sign = if mantissa < 0 { "-" } else { "" };
        if scale == 0 {
            return format!("{sign}{digits}");
        }
        let digits = format!("{digits:0>width$}", width = scale + 1);
        let (int, frac) = digits.split_at(digits.len() - scale);
        format!("{sign}{int}.{frac}")
    }
}

/// `YYYY-rest[zone]`, with PostgreSQL's ` BC` for years before 1 (chrono's
/// year 0 is 1 BC).
fn with_era(rest: &str, year: i32, zone: &str) -> String {
    if year >= 1 {
        format!("{year:04}-{rest}{zone}")
    } else {
        format!("{:04}-{rest}{zone} BC", 1 - year)
    }
}

/// A decimal's text as a mantissa at `scale`, refusing digits beyond it.
fn parse_decimal(text: &str, scale: i8) -> Option<i128> {
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let scale = scale.max(0) as usize;
    if frac.len() > scale
        || int.is_empty()
        || !(int.chars().chain(frac.chars())).all(|c| c.is_ascii_digit())
    {
        return None;
    }
    let padded = format!("{int}{frac:0<scale$}");
    let mantissa: i128 = padded.parse().ok()?;
    Some(if negative { -mantissa } else { mantissa })
}

/// A string literal the server reads the same whatever
/// `standard_conforming_strings` says: `E'...'` with `\` and `'` doubled.
fn quote_literal(text: &str) -> String {
    format!("E'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

/// A table's key: its columns, in order, and their kinds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Key {
    /// Column names, in key order.
    pub names: Vec<String>,
    /// Their kinds.
    pub kinds: Vec<KeyKind>,
}

/// A split's part of the key space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyRange {
    /// `lo <= key <= hi` of a single integer key (ids `{lo}..={hi}`).
    Ints {
        /// First key.
        lo: i64,
        /// Last key.
        hi: i64,
    },
    /// `from <= key < to` over the key tuple; `None` is unbounded.
    Tuples {
        /// First key tuple, inclusive.
        from: Option<Vec<KeyValue>>,
        /// Key tuple past the end, exclusive.
        to: Option<Vec<KeyValue>>,
    },
}

impl Key {
    /// Whether this is one integer column: split by arithmetic on its range.
    pub(crate) fn is_one_integer(&self) -> bool {
        self.kinds == [KeyKind::Int]
    }

    /// `"a"` or `("a", "b")`.
    fn tuple(&self) -> String {
        parenthesized(self.quoted_names())
    }

    fn quoted_names(&self) -> Vec<String> {
        self.names.iter().map(|n| quote_ident(n)).collect()
    }

    fn literals(&self, values: &[KeyValue]) -> Result<String, String> {
        if values.len() != self.kinds.len() {
            return Err(format!(
                "{} key values for a key of {} columns",
                values.len(),
                self.kinds.len()
            ));
        }
        let parts = self
            .kinds
            .iter()
            .zip(values)
            .map(|(kind, value)| kind.literal(value))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(parenthesized(parts))
    }

    /// A key tuple as typed JSON values, in column order.
    fn tuple_json(&self, values: &[KeyValue]) -> Value {
        Value::Array(
            self.kinds
                .iter()
                .zip(values)
                .map(|(kind, value)| kind.to_json(value))
                .collect(),
        )
    }

    /// `ORDER BY` list.
    pub(crate) fn order_by(&self) -> String {
        self.quoted_names().join(", ")
    }

    /// The condition for the rows of `range` after `after` (the cursor).
    /// Row comparisons like `(a, b) > (1, 'x')` use a btree index on `(a, b)`.
    pub(crate) fn predicate(
        &self,
        range: &KeyRange,
        after: Option<&[KeyValue]>,
    ) -> Result<String, String> {
        let tuple = self.tuple();
        let mut parts = Vec::new();
        match (range, after) {
            (_, Some(after)) => parts.push(format!("{tuple} > {}", self.literals(after)?)),
            (KeyRange::Ints { lo, .. }, None) => parts.push(format!("{tuple} >= {lo}")),
            (
                KeyRange::Tuples {
                    from: Some(from), ..
                },
                None,
            ) => parts.push(format!("{tuple} >= {}", self.literals(from)?)),
            (KeyRange::Tuples { from: None, .. }, None) => {}
        }
        match range {
            KeyRange::Ints { hi, .. } => parts.push(format!("{tuple} <= {hi}")),
            KeyRange::Tuples { to: Some(to), .. } => {
                parts.push(format!("{tuple} < {}", self.literals(to)?))
            }
            KeyRange::Tuples { to: None, .. } => {}
        }
        Ok(if parts.is_empty() {
            "true".to_string()
        } else {
            parts.join(" AND ")
        })
    }

    /// The key tuple at `row` of a batch whose key columns are `arrays`.
    pub(crate) fn values_at(
        &self,
        arrays: &[&ArrayRef],
        row: usize,
    ) -> Result<Vec<KeyValue>, String> {
        self.kinds
            .iter()
            .zip(arrays)
            .map(|(kind, array)| kind.value_at(array, row))
            .collect()
    }

    /// A cursor's JSON: a number for one integer key (as before composite
    /// keys existed), else a list of typed values.
    pub(crate) fn cursor_json(&self, after: &[KeyValue]) -> Value {
        match (self.is_one_integer(), after) {
            (true, [KeyValue::Int(v)]) => json!(v),
            _ => self.tuple_json(after),
        }
    }

    /// A checkpointed cursor back.
    pub(crate) fn cursor_from_json(&self, value: &Value) -> Option<Vec<KeyValue>> {
        match value {
            Value::Array(values) if values.len() == self.kinds.len() => self
                .kinds
                .iter()
                .zip(values)
                .map(|(kind, v)| kind.read_json(v))
                .collect(),
            Value::Number(n) if self.is_one_integer() => Some(vec![KeyValue::Int(n.as_i64()?)]),
            _ => None,
        }
    }

    /// A split id's range part: `{lo}..={hi}` for integer ranges, else JSON
    /// `[from, to]`.
    pub(crate) fn range_id(&self, range: &KeyRange) -> String {
        match range {
            KeyRange::Ints { lo, hi } => format!("{lo}..={hi}"),
            KeyRange::Tuples { from, to } => {
                let bound = |b: &Option<Vec<KeyValue>>| {
                    b.as_deref()
                        .map_or(Value::Null, |values| self.tuple_json(values))
                };
                Value::Array(vec![bound(from), bound(to)]).to_string()
            }
        }
    }

    /// A split id's range part back.
    pub(crate) fn parse_range_id(&self, text: &str) -> Option<KeyRange> {
        if let Some((lo, hi)) = text.split_once("..=") {
            if !self.is_one_integer() {
                return None;
            }
            return Some(KeyRange::Ints {
                lo: lo.parse().ok()?,
                hi: hi.parse().ok()?,
            });
        }
        let Value::Array(bounds) = serde_json::from_str(text).ok()? else {
            return None;
        };
        let [from, to] = bounds.as_slice() else {
            return None;
        };
        let bound = |b: &Value| -> Option<Option<Vec<KeyValue>>> {
            match b {
                Value::Null => Some(None),
                Value::Array(_) => Some(Some(self.cursor_from_json(b)?)),
                _ => None,
            }
        };
        Some(KeyRange::Tuples {
            from: bound(from)?,
            to: bound(to)?,
        })
    }
}

/// One part as is, several in parentheses: `a` or `(a, b)`.
fn parenthesized(parts: Vec<String>) -> String {
    match parts.as_slice() {
        [one] => one.clone(),
        many => format!("({})", many.join(", ")),
    }
}

/// The integer ranges that cut `[min, max]` into at most `splits` parts.
pub(crate) fn integer_ranges(min: i64, max: i64, splits: u64) -> Vec<KeyRange> {
    let span = (max as i128 - min as i128 + 1) as u128;
    let count = u128::from(splits.max(1)).min(span);
    (0..count)
        .map(|i| KeyRange::Ints {
            lo: (min as i128 + (span * i / count) as i128) as i64,
            hi: (min as i128 + (span * (i + 1) / count) as i128 - 1) as i64,
        })
        .collect()
}

/// The ranges that cut a key space into about `splits` parts of equal rows,
/// from a sample of keys the server sorted: every `n / splits`-th sampled key
/// is a bound. Equal neighbours are one bound. An empty sample is one range.
pub(crate) fn sampled_ranges(sample: &[Vec<KeyValue>], splits: usize) -> Vec<KeyRange> {
    let n = sample.len();
    let mut bounds: Vec<&Vec<KeyValue>> = Vec::new();
    for i in (1..splits).filter(|_| n > 0) {
        let candidate = &sample[i * n / splits];
        if bounds.last() != Some(&candidate) && candidate != &sample[0] {
            bounds.push(candidate);
        }
    }
    let mut ranges = Vec::with_capacity(bounds.len() + 1);
    let mut from = None;
    for bound in bounds {
        ranges.push(KeyRange::Tuples {
            from: from.take(),
            to: Some(bound.clone()),
        });
        from = Some(bound.clone());
    }
    ranges.push(KeyRange::Tuples { from, to: None });
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, StringArray};
    use std::sync::Arc;

    fn key(names: &[&str], kinds: &[KeyKind]) -> Key {
        Key {
            names: names.iter().map(|n| n.to_string()).collect(),
            kinds: kinds.to_vec(),
        }
    }

    #[test]
    fn literals_are_exact_and_quoted_for_the_server() {
        let cases = [
            (KeyKind::Int, KeyValue::Int(-5), "-5"),
            (
                KeyKind::Numeric { scale: 2 },
                KeyValue::Numeric(-105),
                "'-1.05'",
            ),
            (
                KeyKind::Numeric { scale: 3 },
                KeyValue::Numeric(7),
                "'0.007'",
            ),
            (KeyKind::Numeric { scale: 0 }, KeyValue::Numeric(42), "'42'"),
            (
                KeyKind::Text,
                KeyValue::Text(r"it's a \ path".into()),
                r"E'it''s a \\ path'",
            ),
            (KeyKind::Date, KeyValue::Days(0), "'1970-01-01'"),
            (KeyKind::Date, KeyValue::Days(-719_528), "'0001-01-01 BC'"),
            (
                KeyKind::Timestamp,
                KeyValue::Micros(1_500_001),
                "'1970-01-01 00:00:01.500001'",
            ),
            (
                KeyKind::TimestampTz,
                KeyValue::Micros(-1),
                "'1969-12-31 23:59:59.999999+00'",
            ),
            (
                KeyKind::TimestampTz,
                KeyValue::Micros(-62_198_755_200_000_000),
                "'0002-01-01 00:00:00.000000+00 BC'",
            ),
        ];
        for (kind, value, want) in cases {
            assert_eq!(kind.literal(&value).unwrap(), want, "{kind:?} {value:?}");
        }
        assert!(
            KeyKind::Timestamp
                .literal(&KeyValue::Micros(i64::MAX))
                .is_err()
        );
    }

    #[test]
    fn cursors_round_trip_through_json_exactly() {
        let k = key(
            &["a", "b", "c", "d", "e"],
            &[
                KeyKind::Int,
                KeyKind::Numeric { scale: 4 },
                KeyKind::Uuid,
                KeyKind::Date,
                KeyKind::TimestampTz,
            ],
        );
        let values = vec![
            KeyValue::Int(i64::MAX),
            KeyValue::Numeric(-123_456_789_012_345_678_901_234_567),
            KeyValue::Text("0e4a7f6c-0000-4000-8000-000000000001".into()),
            KeyValue::Days(-3),
            KeyValue::Micros(1_700_000_000_123_456),
        ];
        let json = k.cursor_json(&values);
        assert_eq!(json[1], "-12345678901234567890123.4567");
        assert_eq!(k.cursor_from_json(&json), Some(values));
        // One integer key keeps the plain-number cursor of older checkpoints.
        let int = key(&["id"], &[KeyKind::Int]);
        assert_eq!(int.cursor_json(&[KeyValue::Int(7)]), json!(7));
        assert_eq!(
            int.cursor_from_json(&json!(7)),
            Some(vec![KeyValue::Int(7)])
        );
        // Wrong shapes are refused, not guessed at.
        assert_eq!(k.cursor_from_json(&json!([1, 2])), None);
        assert_eq!(
            key(&["n"], &[KeyKind::Numeric { scale: 1 }]).cursor_from_json(&json!(["1.25"])),
            None
        );
        assert_eq!(int.cursor_from_json(&json!("7")), None);
    }

    #[test]
    fn predicates_bound_the_range_and_resume_after_the_cursor() {
        let int = key(&["id"], &[KeyKind::Int]);
        let ints = KeyRange::Ints { lo: 1, hi: 10 };
        assert_eq!(
            int.predicate(&ints, None).unwrap(),
            r#""id" >= 1 AND "id" <= 10"#
        );
        assert_eq!(
            int.predicate(&ints, Some(&[KeyValue::Int(4)])).unwrap(),
            r#""id" > 4 AND "id" <= 10"#
        );
        let pair = key(&["t", "at"], &[KeyKind::Int, KeyKind::TimestampTz]);
        let first = KeyRange::Tuples {
            from: None,
            to: Some(vec![KeyValue::Int(3), KeyValue::Micros(0)]),
        };
        assert_eq!(
            pair.predicate(&first, None).unwrap(),
            r#"("t", "at") < (3, '1970-01-01 00:00:00.000000+00')"#
        );
        let last = KeyRange::Tuples {
            from: Some(vec![KeyValue::Int(3), KeyValue::Micros(0)]),
            to: None,
        };
        assert_eq!(
            pair.predicate(&last, None).unwrap(),
            r#"("t", "at") >= (3, '1970-01-01 00:00:00.000000+00')"#
        );
        assert_eq!(
            pair.predicate(&last, Some(&[KeyValue::Int(9), KeyValue::Micros(1)]))
                .unwrap(),
            r#"("t", "at") > (9, '1970-01-01 00:00:00.000001+00')"#
        );
        let all = KeyRange::Tuples {
            from: None,
            to: None,
        };
        assert_eq!(pair.predicate(&all, None).unwrap(), "true");
        assert!(pair.predicate(&all, Some(&[KeyValue::Int(1)])).is_err());
    }

    #[test]
    fn split_ids_round_trip_and_refuse_another_key() {
        let text = key(&["code"], &[KeyKind::Text]);
        let range = KeyRange::Tuples {
            from: Some(vec![KeyValue::Text("m\"x".into())]),
            to: None,
        };
        let id = text.range_id(&range);
        assert_eq!(id, r#"[["m\"x"],null]"#);
        assert_eq!(text.parse_range_id(&id), Some(range));
        let int = key(&["id"], &[KeyKind::Int]);
        let ints = KeyRange::Ints { lo: -4, hi: 9 };
        assert_eq!(int.parse_range_id(&int.range_id(&ints)), Some(ints));
        assert_eq!(text.parse_range_id("1..=5"), None);
        assert_eq!(int.parse_range_id(r#"[["a"],null]"#), None);
        assert_eq!(text.parse_range_id("[1]"), None);
    }

    #[test]
    fn integer_ranges_cover_the_span_without_gaps() {
        assert_eq!(
            integer_ranges(1, 10, 3),
            vec![
                KeyRange::Ints { lo: 1, hi: 3 },
                KeyRange::Ints { lo: 4, hi: 6 },
                KeyRange::Ints { lo: 7, hi: 10 },
            ]
        );
        assert_eq!(integer_ranges(5, 6, 16).len(), 2);
        let whole = integer_ranges(i64::MIN, i64::MAX, 2);
        assert_eq!(
            whole[0],
            KeyRange::Ints {
                lo: i64::MIN,
                hi: -1
            }
        );
        assert_eq!(
            whole[1],
            KeyRange::Ints {
                lo: 0,
                hi: i64::MAX
            }
        );
    }

    #[test]
    fn sampled_ranges_chain_bounds_and_merge_repeats() {
        let s = |v: &[&str]| -> Vec<Vec<KeyValue>> {
            v.iter()
                .map(|x| vec![KeyValue::Text(x.to_string())])
                .collect()
        };
        let t = |x: &str| Some(vec![KeyValue::Text(x.to_string())]);
        let r = |from, to| KeyRange::Tuples { from, to };
        let cases: Vec<(Vec<Vec<KeyValue>>, usize, Vec<KeyRange>)> = vec![
            (s(&[]), 4, vec![r(None, None)]),
            (s(&["a"]), 4, vec![r(None, None)]),
            (s(&["a", "b", "c", "d"]), 1, vec![r(None, None)]),
            (
                s(&["a", "b", "c", "d"]),
                2,
                vec![r(None, t("c")), r(t("c"), None)],
            ),
            (
                s(&["a", "b", "c", "d", "e", "f"]),
                3,
                vec![r(None, t("c")), r(t("c"), t("e")), r(t("e"), None)],
            ),
            // Repeated keys (one hot value) are one bound, never an empty range;
            // a value that is all the sample cannot be cut at all.
            (
                s(&["a", "b", "b", "b", "b", "z"]),
                3,
                vec![r(None, t("b")), r(t("b"), None)],
            ),
            (s(&["a", "a", "a", "a", "a", "z"]), 3, vec![r(None, None)]),
        ];
        for (sample, splits, want) in cases {
            assert_eq!(
                sampled_ranges(&sample, splits),
                want,
                "{sample:?} / {splits}"
            );
        }
    }

    #[test]
    fn key_values_come_from_the_batch_and_nulls_are_refused() {
        let ints: ArrayRef = Arc::new(Int32Array::from(vec![Some(3), None]));
        let text: ArrayRef = Arc::new(StringArray::from(vec!["x", "y"]));
        let k = key(&["a", "b"], &[KeyKind::Int, KeyKind::Text]);
        assert_eq!(
            k.values_at(&[&ints, &text], 0).unwrap(),
            vec![KeyValue::Int(3), KeyValue::Text("x".into())]
        );
        assert!(
            k.values_at(&[&ints, &text], 1)
                .unwrap_err()
                .contains("NULL")
        );
        assert!(KeyKind::Date.value_at(&text, 0).is_err());
    }
}
