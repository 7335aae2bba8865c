//! Table metadata from the catalog, and the mapping of PostgreSQL types to Arrow.

use arrow::datatypes::{DataType, TimeUnit};
use sqlx::PgPool;

use crate::errors::{db_error, user_error};
use tidewater_core::Result;

/// Scale used for `numeric` columns declared without precision and scale.
pub const UNCONSTRAINED_NUMERIC_SCALE: i8 = 10;

/// One column of a table.
#[derive(Debug, Clone, PartialEq)]
pub struct PgColumn {
    /// Its name.
    pub name: String,
    /// Its type's name in `pg_type` (`int8`, `numeric`, ...).
    pub udt: String,
    /// Its full type as PostgreSQL prints it (`numeric(12,2)`), for casts.
    pub sql_type: String,
    /// Whether it may hold NULL.
    pub nullable: bool,
    /// The Arrow type it is read as.
    pub arrow: Option<DataType>,
}

/// The Arrow type of a PostgreSQL type, or `None` when tidewater cannot read it.
pub fn arrow_type(udt: &str, typmod: i32) -> Option<DataType> {
    Some(match udt {
        "int2" => DataType::Int16,
        "int4" => DataType::Int32,
        "int8" => DataType::Int64,
        "float4" => DataType::Float32,
        "float8" => DataType::Float64,
        "numeric" if typmod >= 4 => {
            let precision = (((typmod - 4) >> 16) & 0xffff) as u8;
            let scale = ((typmod - 4) & 0xffff) as i8;
            DataType::Decimal128(precision.clamp(1, 38), scale)
        }
        "numeric" => DataType::Decimal128(38, UNCONSTRAINED_NUMERIC_SCALE),
        "bool" => DataType::Boolean,
        "text" | "varchar" | "bpchar" | "name" | "uuid" | "json" | "jsonb" => DataType::Utf8,
        "bytea" => DataType::Binary,
        "date" => DataType::Date32,
        "timestamp" => DataType::Timestamp(TimeUnit::Microsecond, None),
        "timestamptz" => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        _ => return None,
    })
}

/// The columns of `table` (optionally schema-qualified), in order.
pub async fn describe(pool: &PgPool, table: &str) -> Result<Vec<PgColumn>> {
    let rows: Vec<(String, String, String, bool, i32)> = sqlx::query_as(
        "SELECT a.attname::text, t.typname::text, format_type(a.atttypid, a.atttypmod), \
                NOT a.attnotnull, a.atttypmod \
         FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
         WHERE a.attrelid = $1::text::regclass AND a.attnum > 0 AND NOT a.attisdropped \
         ORDER BY a.attnum",
    )
    .bind(table)
    .fetch_all(pool)
    .await
    .map_err(|e| match e.as_database_error().and_then(|d| d.code()) {
        Some(code) if code == "42P01" => user_error(format!(
            "table '{table}' does not exist; check the name (and its schema) and the database URL"
        )),
        _ => db_error(&format!("describing table '{table}'"), e),
    })?;
    if rows.is_empty() {
        return Err(user_error(format!("table '{table}' has no columns")));
    }
    Ok(rows
        .into_iter()
        .map(|(name, udt, sql_type, nullable, typmod)| PgColumn {
            arrow: arrow_type(&udt, typmod),
            name,
            udt,
            sql_type,
            nullable,
        })
        .collect())
}

/// The primary key columns of `table`, in key order.
pub async fn primary_key(pool: &PgPool, table: &str) -> Result<Vec<String>> {
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT a.attname::text \
         FROM pg_index i, unnest(i.indkey) WITH ORDINALITY AS k(attnum, n), pg_attribute a \
         WHERE i.indrelid = $1::text::regclass AND i.indisprimary \
           AND a.attrelid = i.indrelid AND a.attnum = k.attnum \
         ORDER BY k.n",
    )
    .bind(table)
    .fetch_all(pool)
    .await
    .map_err(|e| db_error(&format!("reading the primary key of '{table}'"), e))?;
    Ok(rows.into_iter().map(|r| r.0).collect())
}

/// Whether `table` has a unique index (or primary key) without a predicate
/// or expressions whose key columns are all among `columns` (then no two
/// rows share a `columns` tuple), or with `exact`, are exactly `columns`
/// (what `ON CONFLICT (columns)` needs).
pub async fn has_unique_index(
    pool: &PgPool,
    table: &str,
    columns: &[String],
    exact: bool,
) -> Result<bool> {
    let (unique,): (bool,) = sqlx::query_as(
        "SELECT EXISTS ( \
           SELECT 1 FROM pg_index i \
           CROSS JOIN LATERAL ( \
             SELECT array_agg(a.attname::text) AS names, bool_and(a.attname IS NOT NULL) AS plain \
             FROM unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) \
             LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
             WHERE k.n <= i.indnkeyatts) c \
           WHERE i.indrelid = $1::text::regclass AND i.indisunique AND i.indpred IS NULL \
             AND c.plain AND c.names <@ $2 AND (NOT $3 OR c.names @> $2))",
    )
    .bind(table)
    .bind(columns)
    .bind(exact)
    .fetch_one(pool)
    .await
    .map_err(|e| db_error(&format!("reading the unique indexes of '{table}'"), e))?;
    Ok(unique)
}

/// Quotes an identifier (a column or table name part) for SQL.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Quotes a possibly schema-qualified table name.
pub fn quote_table(table: &str) -> String {
    table
        .split('.')
        .map(quote_ident)
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_typmods_become_decimal_precision_and_scale() {
        // numeric(12,2): typmod = (12 << 16 | 2) + 4
        assert_eq!(
            arrow_type("numeric", (12 << 16 | 2) + 4),
            Some(DataType::Decimal128(12, 2))
        );
        assert_eq!(
            arrow_type("numeric", -1),
            Some(DataType::Decimal128(38, 10))
        );
        assert_eq!(arrow_type("int8", -1), Some(DataType::Int64));
        assert_eq!(arrow_type("tsvector", -1), None);
        assert_eq!(
            quote_table("public.my \"t\""),
            "\"public\".\"my \"\"t\"\"\""
        );
    }
}
