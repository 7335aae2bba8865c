//! Arrow columns as PostgreSQL array parameters, for `INSERT ... SELECT FROM UNNEST(...)`.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, TimeUnit, TimestampMicrosecondType,
};
use chrono::{DateTime, NaiveDate, NaiveDateTime};
use rust_decimal::Decimal;
use sqlx::Postgres;
use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use tidewater_core::{Error, Result};

/// The PostgreSQL array type an Arrow column is sent as.
pub fn array_type(data_type: &DataType) -> Result<&'static str> {
    Ok(match data_type {
        DataType::Int16 => "int2[]",
        DataType::Int32 => "int4[]",
        DataType::Int64 => "int8[]",
        DataType::Float32 => "float4[]",
        DataType::Float64 => "float8[]",
        DataType::Boolean => "bool[]",
        DataType::Utf8 | DataType::LargeUtf8 => "text[]",
        DataType::Binary => "bytea[]",
        DataType::Date32 => "date[]",
        DataType::Timestamp(TimeUnit::Microsecond, None) => "timestamp[]",
        DataType::Timestamp(TimeUnit::Microsecond, Some(_)) => "timestamptz[]",
        DataType::Decimal128(..) => "numeric[]",
        other => {
            return Err(Error::BadInput(format!(
                "the PostgreSQL sink cannot write Arrow type {other} yet; cast the column first \
                 (supported: integers, floats, bool, utf8, binary, date32, timestamp(us), decimal128)"
            )));
        }
    })
}

fn opt<T: Copy, A: Array>(array: &A, values: &[T]) -> Vec<Option<T>> {
    (0..values.len())
        .map(|i| array.is_valid(i).then_some(values[i]))
        .collect()
}

/// Binds `column` as one array parameter of `query`.
pub fn bind<'q>(
    query: Query<'q, Postgres, PgArguments>,
    column: &'q ArrayRef,
) -> Result<Query<'q, Postgres, PgArguments>> {
    let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).expect("valid date");
    Ok(match column.data_type() {
        DataType::Int16 => {
            let a = column.as_primitive::<Int16Type>();
            query.bind(opt(a, a.values()))
        }
        DataType::Int32 => {
            let a = column.as_primitive::<Int32Type>();
            query.bind(opt(a, a.values()))
        }
        DataType::Int64 => {
            let a = column.as_primitive::<Int64Type>();
            query.bind(opt(a, a.values()))
        }
        DataType::Float32 => {
            let a = column.as_primitive::<Float32Type>();
            query.bind(opt(a, a.values()))
        }
        DataType::Float64 => {
            let a = column.as_primitive::<Float64Type>();
            query.bind(opt(a, a.values()))
        }
        DataType::Boolean => query.bind(column.as_boolean().iter().collect::<Vec<_>>()),
        DataType::Utf8 => query.bind(column.as_string::<i32>().iter().collect::<Vec<_>>()),
        DataType::LargeUtf8 => query.bind(column.as_string::<i64>().iter().collect::<Vec<_>>()),
        DataType::Binary => query.bind(column.as_binary::<i32>().iter().collect::<Vec<_>>()),
        DataType::Date32 => {
            let a = column.as_primitive::<Date32Type>();
            query.bind(
                a.iter()
                    .map(|d| d.map(|d| epoch + chrono::TimeDelta::days(i64::from(d))))
                    .collect::<Vec<Option<NaiveDate>>>(),
            )
        }
        DataType::Timestamp(TimeUnit::Microsecond, tz) => {
            let a = column.as_primitive::<TimestampMicrosecondType>();
            let times = a
                .iter()
                .map(|t| t.and_then(DateTime::from_timestamp_micros));
            if tz.is_some() {
                query.bind(times.collect::<Vec<_>>())
            } else {
                query.bind(
                    times
                        .map(|t| t.map(|t| t.naive_utc()))
                        .collect::<Vec<Option<NaiveDateTime>>>(),
                )
            }
        }
        DataType::Decimal128(_, scale) => {
            let a = column.as_primitive::<Decimal128Type>();
            let values = a
                .iter()
                .map(|v| {
                    v.map(|m| {
                        Decimal::try_from_i128_with_scale(m, *scale as u32).map_err(|e| {
                            Error::BadInput(format!("decimal {m}e-{scale} does not fit PostgreSQL's numeric via rust_decimal: {e}"))
                        })
                    })
                    .transpose()
                })
                .collect::<Result<Vec<_>>>()?;
            query.bind(values)
        }
        other => return Err(Error::BadInput(format!("cannot bind Arrow type {other}"))),
    })
}
