//! SQL text to an expression DataFusion can evaluate on a batch: parse,
//! resolve columns and functions against the input's schema, coerce types,
//! plan. Every failure says what was wrong in the user's terms.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use datafusion_common::config::ConfigOptions;
use datafusion_common::{DFSchema, DataFusionError, SchemaError, TableReference};
use datafusion_expr::execution_props::ExecutionProps;
use datafusion_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion_expr::planner::{ContextProvider, ExprPlanner};
use datafusion_expr::simplify::SimplifyContext;
use datafusion_expr::{AggregateUDF, HigherOrderUDF, ScalarUDF, TableSource, WindowUDF};
use datafusion_optimizer::simplify_expressions::ExprSimplifier;
use datafusion_physical_expr::PhysicalExpr;
use datafusion_sql::planner::{PlannerContext, SqlToRel};
use datafusion_sql::sqlparser::ast;
use datafusion_sql::sqlparser::dialect::GenericDialect;
use datafusion_sql::sqlparser::parser::Parser;
use datafusion_sql::sqlparser::tokenizer::Token;

use crate::bridge::df;
use crate::error::SqlError;

/// The functions and syntax extensions expressions may use: DataFusion's
/// scalar functions (string, math, date/time, regex, unicode).
struct Functions {
    udfs: HashMap<String, Arc<ScalarUDF>>,
    planners: Vec<Arc<dyn ExprPlanner>>,
    options: ConfigOptions,
}

fn functions() -> &'static Functions {
    static FUNCTIONS: OnceLock<Functions> = OnceLock::new();
    FUNCTIONS.get_or_init(|| {
        let mut udfs = HashMap::new();
        for f in datafusion_functions::all_default_functions() {
            for alias in f.aliases() {
                udfs.insert(alias.clone(), f.clone());
            }
            udfs.insert(f.name().to_string(), f);
        }
        Functions {
            udfs,
            planners: vec![
                Arc::new(datafusion_functions::core::planner::CoreFunctionPlanner::default()),
                Arc::new(datafusion_functions::unicode::planner::UnicodeFunctionPlanner),
                Arc::new(datafusion_functions::datetime::planner::DatetimeFunctionPlanner),
            ],
            options: ConfigOptions::default(),
        }
    })
}

impl ContextProvider for Functions {
    fn get_table_source(
        &self,
        name: TableReference,
    ) -> datafusion_common::Result<Arc<dyn TableSource>> {
        datafusion_common::plan_err!(
            "an expression reads the row's columns, not tables (it names '{name}')"
        )
    }

    fn get_expr_planners(&self) -> &[Arc<dyn ExprPlanner>] {
        &self.planners
    }

    fn get_function_meta(&self, name: &str) -> Option<Arc<ScalarUDF>> {
        self.udfs.get(name).cloned()
    }

    fn get_higher_order_meta(&self, _name: &str) -> Option<Arc<HigherOrderUDF>> {
        None
    }

    fn get_aggregate_meta(&self, _name: &str) -> Option<Arc<AggregateUDF>> {
        None
    }

    fn get_window_meta(&self, _name: &str) -> Option<Arc<WindowUDF>> {
        None
    }

    fn get_variable_type(&self, _names: &[String]) -> Option<df::DataType> {
        None
    }

    fn options(&self) -> &ConfigOptions {
        &self.options
    }

    fn udf_names(&self) -> Vec<String> {
        self.udfs.keys().cloned().collect()
    }

    fn higher_order_function_names(&self) -> Vec<String> {
        Vec::new()
    }

    fn udaf_names(&self) -> Vec<String> {
        Vec::new()
    }

    fn udwf_names(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Parses one SQL expression, all of `text`.
pub(crate) fn parse(text: &str) -> Result<ast::Expr, SqlError> {
    let mut parser = Parser::new(&GenericDialect {})
        .try_with_sql(text)
        .map_err(|e| SqlError::Syntax(clean(&e.to_string())))?;
    let expr = parser
        .parse_expr()
        .map_err(|e| SqlError::Syntax(clean(&e.to_string())))?;
    let next = parser.peek_token();
    if next.token != Token::EOF {
        return Err(SqlError::Syntax(format!(
            "unexpected '{}' after the expression",
            next.token
        )));
    }
    Ok(expr)
}

/// An expression planned against an input schema.
#[derive(Debug, Clone)]
pub(crate) struct Compiled {
    pub physical: Arc<dyn PhysicalExpr>,
    pub data_type: df::DataType,
    pub nullable: bool,
}

/// Plans `text` against `schema`.
pub(crate) fn compile(text: &str, schema: &df::SchemaRef) -> Result<Compiled, SqlError> {
    let parsed = parse(text)?;
    let df_schema = Arc::new(
        DFSchema::try_from(Arc::clone(schema)).map_err(|e| SqlError::Internal(e.to_string()))?,
    );
    let functions = functions();
    let logical = SqlToRel::new(functions)
        .sql_to_expr(parsed, &df_schema, &mut PlannerContext::new())
        .map_err(|e| explain(e, schema))?;
    let simplifier = ExprSimplifier::new(
        SimplifyContext::builder()
            .with_schema(Arc::clone(&df_schema))
            .build(),
    );
    // Coerce types, then simplify: some functions (coalesce, nvl) only
    // evaluate in their simplified form, and constants fold once here.
    let coerced = simplifier
        .coerce(logical, &df_schema)
        .and_then(|e| simplifier.simplify(e))
        .map_err(|e| explain(e, schema))?;
    let physical = datafusion_physical_expr::create_physical_expr(
        &coerced,
        &df_schema,
        &ExecutionProps::new(),
        &PhysicalPlanningContext::default(),
    )
    .map_err(|e| explain(e, schema))?;
    let field = physical
        .return_field(schema)
        .map_err(|e| explain(e, schema))?;
    Ok(Compiled {
        physical,
        data_type: field.data_type().clone(),
        nullable: field.is_nullable(),
    })
}

/// A DataFusion error in the user's terms.
fn explain(error: DataFusionError, schema: &df::Schema) -> SqlError {
    match error.find_root() {
        DataFusionError::SchemaError(e, _) => match e.as_ref() {
            SchemaError::FieldNotFound { field, .. } => SqlError::UnknownColumn {
                column: field.name.clone(),
                columns: schema
                    .fields()
                    .iter()
                    .map(|f| format!("{}: {}", f.name(), f.data_type()))
                    .collect::<Vec<_>>()
                    .join(", "),
            },
            other => SqlError::Type(clean(&other.to_string())),
        },
        other => {
            let text = clean(&other.to_string());
            if text.starts_with("Invalid function") {
                SqlError::UnknownFunction(text)
            } else {
                SqlError::Type(text)
            }
        }
    }
}

/// Drops DataFusion's internal prefixes ("Error during planning: ").
pub(crate) fn clean(message: &str) -> String {
    let mut text = message.trim();
    for prefix in [
        "Error during planning: ",
        "Schema error: ",
        "sql parser error: ",
        "SQL error: ParserError(\"",
        "Optimizer rule 'type_coercion' failed\ncaused by\n",
        "Arrow error: ",
    ] {
        if let Some(rest) = text.strip_prefix(prefix) {
            text = rest;
        }
    }
    text.trim_end_matches("\")").replace('\n', " ")
}
