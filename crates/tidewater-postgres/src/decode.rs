//! Rows from PostgreSQL into Arrow arrays, one builder per column.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, Float32Builder,
    Float64Builder, Int16Builder, Int32Builder, Int64Builder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use arrow::datatypes::{DataType, TimeUnit};
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use rust_decimal::Decimal;
use sqlx::Row;
use sqlx::postgres::PgRow;
use tidewater_core::{Error, Result};

use crate::schema::PgColumn;

/// Builds one Arrow column from the rows of a query.
pub enum ColumnBuilder {
    Int16(Int16Builder),
    Int32(Int32Builder),
    Int64(Int64Builder),
    Float32(Float32Builder),
    Float64(Float64Builder),
    Decimal(Decimal128Builder, u8, i8),
    Boolean(BooleanBuilder),
    Text(StringBuilder, TextKind),
    Binary(BinaryBuilder),
    Date(Date32Builder),
    Timestamp(TimestampMicrosecondBuilder, bool),
}

/// How a column read as Utf8 is decoded.
#[derive(Clone, Copy)]
pub enum TextKind {
    Plain,
    Uuid,
    Json,
}

fn unix_epoch() -> NaiveDate {
    NaiveDate::from_ymd_opt(1970, 1, 1).expect("valid date")
}

impl ColumnBuilder {
    /// A builder for `column`, sized for `capacity` rows.
    pub fn new(column: &PgColumn, capacity: usize) -> Result<Self> {
        let unsupported = || {
            Error::BadInput(format!(
                "column '{}' has type {} which tidewater cannot read yet; leave it out of \
                 the source's columns (supported: int2, int4, int8, float4, float8, numeric, \
                 bool, text, varchar, bytea, date, timestamp, timestamptz, uuid, json, jsonb)",
                column.name, column.sql_type
            ))
        };
        let arrow = column.arrow.clone().ok_or_else(unsupported)?;
        Ok(match arrow {
            DataType::Int16 => Self::Int16(Int16Builder::with_capacity(capacity)),
            DataType::Int32 => Self::Int32(Int32Builder::with_capacity(capacity)),
            DataType::Int64 => Self::Int64(Int64Builder::with_capacity(capacity)),
            DataType::Float32 => Self::Float32(Float32Builder::with_capacity(capacity)),
            DataType::Float64 => Self::Float64(Float64Builder::with_capacity(capacity)),
            DataType::Decimal128(p, s) => Self::Decimal(
                Decimal128Builder::with_capacity(capacity).with_precision_and_scale(p, s)?,
                p,
                s,
            ),
            DataType::Boolean => Self::Boolean(BooleanBuilder::with_capacity(capacity)),
            DataType::Utf8 => {
                let kind = match column.udt.as_str() {
                    "uuid" => TextKind::Uuid,
                    "json" | "jsonb" => TextKind::Json,
                    _ => TextKind::Plain,
                };
                Self::Text(StringBuilder::with_capacity(capacity, capacity * 16), kind)
            }
            DataType::Binary => Self::Binary(BinaryBuilder::with_capacity(capacity, capacity * 16)),
            DataType::Date32 => Self::Date(Date32Builder::with_capacity(capacity)),
            DataType::Timestamp(TimeUnit::Microsecond, tz) => Self::Timestamp(
                TimestampMicrosecondBuilder::with_capacity(capacity).with_timezone_opt(tz.clone()),
                tz.is_some(),
            ),
            _ => return Err(unsupported()),
        })
    }

    /// Appends column `index` of `row`.
    pub fn append(&mut self, row: &PgRow, index: usize, name: &str) -> Result<()> {
        let bad = |e: sqlx::Error| {
            Error::BadInput(format!("column '{name}': cannot decode a value: {e}"))
        };
        match self {
            Self::Int16(b) => b.append_option(row.try_get::<Option<i16>, _>(index).map_err(bad)?),
            Self::Int32(b) => b.append_option(row.try_get::<Option<i32>, _>(index).map_err(bad)?),
            Self::Int64(b) => b.append_option(row.try_get::<Option<i64>, _>(index).map_err(bad)?),
            Self::Float32(b) => b.append_option(row.try_get::<Option<f32>, _>(index).map_err(bad)?),
            Self::Float64(b) => b.append_option(row.try_get::<Option<f64>, _>(index).map_err(bad)?),
            Self::Boolean(b) => {
                b.append_option(row.try_get::<Option<bool>, _>(index).map_err(bad)?)
            }
            Self::Decimal(b, precision, scale) => {
                match row.try_get::<Option<Decimal>, _>(index).map_err(bad)? {
                    None => b.append_null(),
                    Some(mut value) => {
                        value.rescale(*scale as u32);
                        let mantissa = value.mantissa();
                        if mantissa.unsigned_abs() >= 10u128.pow(u32::from(*precision)) {
                            return Err(Error::BadInput(format!(
                                "column '{name}': {value} does not fit decimal({precision},{scale})"
                            )));
                        }
                        b.append_value(mantissa)
                    }
                }
            }
            Self::Text(b, TextKind::Plain) => {
                b.append_option(row.try_get::<Option<&str>, _>(index).map_err(bad)?)
            }
            Self::Text(b, TextKind::Uuid) => b.append_option(
                row.try_get::<Option<uuid::Uuid>, _>(index)
                    .map_err(bad)?
                    .map(|u| u.hyphenated().to_string()),
            ),
            Self::Text(b, TextKind::Json) => b.append_option(
                row.try_get::<Option<serde_json::Value>, _>(index)
                    .map_err(bad)?
                    .map(|v| v.to_string()),
            ),
            Self::Binary(b) => {
                b.append_option(row.try_get::<Option<&[u8]>, _>(index).map_err(bad)?)
            }
            Self::Date(b) => b.append_option(
                row.try_get::<Option<NaiveDate>, _>(index)
                    .map_err(bad)?
                    .map(|d| (d - unix_epoch()).num_days() as i32),
            ),
            Self::Timestamp(b, false) => b.append_option(
                row.try_get::<Option<NaiveDateTime>, _>(index)
                    .map_err(bad)?
                    .map(|t| t.and_utc().timestamp_micros()),
            ),
            Self::Timestamp(b, true) => b.append_option(
                row.try_get::<Option<DateTime<Utc>>, _>(index)
                    .map_err(bad)?
                    .map(|t| t.timestamp_micros()),
            ),
        }
        Ok(())
    }

    /// The finished array.
    pub fn finish(&mut self) -> ArrayRef {
        match self {
            Self::Int16(b) => Arc::new(b.finish()),
            Self::Int32(b) => Arc::new(b.finish()),
            Self::Int64(b) => Arc::new(b.finish()),
            Self::Float32(b) => Arc::new(b.finish()),
            Self::Float64(b) => Arc::new(b.finish()),
            Self::Decimal(b, ..) => Arc::new(b.finish()),
            Self::Boolean(b) => Arc::new(b.finish()),
            Self::Text(b, _) => Arc::new(b.finish()),
            Self::Binary(b) => Arc::new(b.finish()),
            Self::Date(b) => Arc::new(b.finish()),
            Self::Timestamp(b, _) => Arc::new(b.finish()),
        }
    }
}
