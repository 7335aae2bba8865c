//! Aggregate calls written as SQL (`count(*)`, `sum(v)`) read into the
//! engine's [`AggregateSpec`](tidewater_core::AggregateSpec).

use datafusion_sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, ObjectNamePart,
};
use tidewater_core::AggregateSpec;

use crate::compile::parse;
use crate::error::SqlError;

/// Adds `output = call` to `spec`, where `call` is `count(*)`,
/// `count(col)`, `sum(col)`, `min(col)` or `max(col)`.
///
/// ```
/// use tidewater_core::AggregateSpec;
/// let spec = tidewater_sql::add_aggregate(AggregateSpec::new(), "n", "count(*)").unwrap();
/// let spec = tidewater_sql::add_aggregate(spec, "total", "SUM(v)").unwrap();
/// assert_eq!(spec.exprs().len(), 2);
/// assert!(tidewater_sql::add_aggregate(AggregateSpec::new(), "x", "avg(v)").is_err());
/// ```
pub fn add_aggregate(
    spec: AggregateSpec,
    output: &str,
    call: &str,
) -> Result<AggregateSpec, SqlError> {
    let unsupported = || {
        SqlError::Aggregate(format!(
            "'{call}' is not an aggregate tidewater computes; use count(*), count(col), \
             sum(col), min(col) or max(col) on one input column"
        ))
    };
    let Expr::Function(f) = parse(call)? else {
        return Err(unsupported());
    };
    let name = match f.name.0.as_slice() {
        [ObjectNamePart::Identifier(ident)] => ident.value.to_lowercase(),
        _ => return Err(unsupported()),
    };
    let FunctionArguments::List(list) = &f.args else {
        return Err(unsupported());
    };
    if list.duplicate_treatment.is_some() || !list.clauses.is_empty() || f.filter.is_some() {
        return Err(unsupported());
    }
    let column = match list.args.as_slice() {
        [FunctionArg::Unnamed(FunctionArgExpr::Wildcard)] => None,
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Identifier(ident)))] => {
            Some(ident.value.clone())
        }
        _ => return Err(unsupported()),
    };
    Ok(match (name.as_str(), column) {
        ("count", None) => spec.count(output),
        ("count", Some(c)) => spec.count_values(&c, output),
        ("sum", Some(c)) => spec.sum(&c, output),
        ("min", Some(c)) => spec.min(&c, output),
        ("max", Some(c)) => spec.max(&c, output),
        _ => return Err(unsupported()),
    })
}
