//! What the two τ² toolkits share: the tool table, dispatch (τ²'s
//! `Environment.get_response`), result rendering (`to_json_str`) and the
//! generic tools.

use ecdysis_env::ToolOutput;
use ecdysis_pyemu::call::{self, Signature};
use ecdysis_pyemu::pydantic::{self, Input, Model};
use ecdysis_pyemu::{PyErr, PyResult, Val, calc, json, ops};

use super::db::Db;

/// What a tool returns before rendering.
pub enum Out {
    /// A `str`, shown as is.
    Text(String),
    /// A model, or a list of models, shown as `json.dumps(model_dump())`.
    Json(Val),
}

/// τ²'s tool categories (`ToolType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Reads the database.
    Read,
    /// Writes the database.
    Write,
    /// Touches no state (`calculate`, `transfer_to_human_agents`).
    Generic,
}

/// A tool implementation: its Python signature, category and body. The
/// body receives the bound arguments in parameter order.
pub struct ToolDef {
    /// Tool name.
    pub name: &'static str,
    /// Parameter names, in signature order.
    pub params: &'static [&'static str],
    /// Category; `Write` tools mutate.
    pub kind: Kind,
    /// The tool body.
    pub run: fn(&mut Db, &[Val]) -> PyResult<Out>,
}

/// A toolkit: the Python class name (for binding errors) and its tools in
/// the reference's order.
pub struct Toolkit {
    /// `AirlineTools` or `RetailTools`.
    pub class: &'static str,
    /// The tools, in `ToolKitBase.tools` order.
    pub tools: &'static [ToolDef],
}

/// What the model reads when a tool raises: `Error: <str(exc)>`, as τ²'s
/// `get_response` writes it. An emulation limit (`InternalError`, not an
/// exception the reference would raise) is also logged.
pub(crate) fn error_output(tool: &str, e: ecdysis_pyemu::PyErr) -> ToolOutput {
    if e.kind == "InternalError" {
        tracing::warn!(tool, "emulation limit: {}", e.msg);
    }
    ToolOutput {
        content: format!("Error: {}", e.msg),
        error: true,
    }
}

impl Toolkit {
    /// Runs one tool call like `Environment.get_response`: any exception
    /// becomes the result `Error: <str(exc)>`.
    pub fn call(&self, db: &mut Db, name: &str, arguments: &serde_json::Value) -> ToolOutput {
        match self.try_call(db, name, arguments) {
            Ok(Out::Text(content)) => ToolOutput {
                content,
                error: false,
            },
            Ok(Out::Json(v)) => ToolOutput {
                content: json::dumps(&v),
                error: false,
            },
            Err(e) => error_output(name, e),
        }
    }

    fn try_call(&self, db: &mut Db, name: &str, arguments: &serde_json::Value) -> PyResult<Out> {
        // τ²'s ToolCall.arguments is a dict; anything else never reaches a
        // tool there. Here it is reported the way a tool error is.
        let kwargs = keyword_arguments(arguments)?;
        call::check_dispatch(&kwargs)?;
        let Some(tool) = self.tools.iter().find(|t| t.name == name) else {
            return Err(PyErr::value(format!("Tool '{name}' not found.")));
        };
        let bound = call::bind(
            &Signature {
                class: self.class,
                name: tool.name,
                params: tool.params,
            },
            &kwargs,
        )?;
        (tool.run)(db, &bound)
    }
}

/// A tool call's arguments as Python keyword arguments. τ²'s
/// `ToolCall.arguments` is a dict; anything else never reaches a tool
/// there, and is reported here the way a tool error is.
pub fn keyword_arguments(arguments: &serde_json::Value) -> PyResult<Vec<(&str, Val)>> {
    let Some(obj) = arguments.as_object() else {
        return Err(PyErr::type_error(format!(
            "tool arguments must be a JSON object, not {}",
            Val::from_json(arguments).type_name()
        )));
    };
    Ok(obj
        .iter()
        .map(|(k, v)| (k.as_str(), Val::from_json(v)))
        .collect())
}

/// A list argument the tools convert with
/// `if all(isinstance(x, dict) for x in xs): xs = [Model(**x) for x in xs]`.
pub enum Seq {
    /// Every item was a dict and is now a model instance.
    Models(Vec<Val>),
    /// The argument as given (some item was not a dict); attribute access
    /// on its items fails.
    Raw(Val),
}

impl Seq {
    /// Performs the conversion; iterating a non-iterable raises, and the
    /// first item that fails validation raises its `ValidationError`.
    pub fn convert(arg: &Val, model: &'static Model) -> PyResult<Seq> {
        let items = ops::iterate(arg)?;
        if !items.iter().all(|x| matches!(x, Val::Dict(_))) {
            return Ok(Seq::Raw(arg.clone()));
        }
        let mut out = Vec::with_capacity(items.len());
        for item in &items {
            let kwargs: Vec<(&str, Input)> = match item {
                Val::Dict(d) => d.iter().map(|(k, v)| (k, Input::Raw(v.clone()))).collect(),
                _ => Vec::new(),
            };
            out.push(pydantic::construct(model, kwargs)?);
        }
        Ok(Seq::Models(out))
    }

    /// The value passed on to a model constructor (`deepcopy(xs)`).
    pub fn input(&self) -> Input {
        match self {
            Seq::Models(items) => Input::Instances(items.clone()),
            Seq::Raw(v) => Input::Raw(v.clone()),
        }
    }

    /// `len(xs)`.
    pub fn py_len(&self) -> PyResult<usize> {
        match self {
            Seq::Models(items) => Ok(items.len()),
            Seq::Raw(v) => ops::len(v),
        }
    }

    /// The items as model instances; for raw items, the `AttributeError`
    /// that reading `attr` from the first one raises.
    pub fn models(&self, attr: &str) -> PyResult<Vec<Val>> {
        match self {
            Seq::Models(items) => Ok(items.clone()),
            Seq::Raw(v) => match ops::iterate(v)?.first() {
                Some(first) => Err(PyErr::attribute(first, attr)),
                None => Ok(Vec::new()),
            },
        }
    }

    /// The value stored by `obj.field = deepcopy(xs)`.
    pub fn stored(&self) -> Val {
        match self {
            Seq::Models(items) => Val::list(items.clone()),
            Seq::Raw(v) => v.clone(),
        }
    }
}

/// `calculate(expression)`, shared by both toolkits.
pub fn calculate(_: &mut Db, a: &[Val]) -> PyResult<Out> {
    let expr = &a[0];
    match expr {
        Val::Str(s) => calc::calculate(s).map(Out::Text),
        _ => {
            // `all(char in ALPHABET for char in expression)` over a non-str.
            for item in ops::iterate(expr)? {
                match &item {
                    Val::Str(s) => {
                        if !calc::ALPHABET.contains(&**s) {
                            return Err(PyErr::value("Invalid characters in expression"));
                        }
                    }
                    other => {
                        return Err(PyErr::type_error(format!(
                            "'in <string>' requires string as left operand, not {}",
                            other.type_name()
                        )));
                    }
                }
            }
            Err(PyErr::type_error(
                "eval() arg 1 must be a string, bytes or code object",
            ))
        }
    }
}

/// `transfer_to_human_agents(summary)`.
pub fn transfer_to_human_agents(_: &mut Db, _: &[Val]) -> PyResult<Out> {
    Ok(Out::Text("Transfer successful".into()))
}

/// `f"...{v}..."`: `str(v)`.
pub fn s(v: &Val) -> String {
    ops::s(v)
}
