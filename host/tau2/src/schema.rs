//! Tool specs derived at run time from the τ² package's own sources, the
//! way the reference builds them (`Tool.openai_schema`): each `@is_tool`
//! method of the toolkit class becomes a pydantic model named `parameters`
//! whose fields are the method's parameters (described by the docstring's
//! `Args:` entries), and its `model_json_schema()` is the spec's
//! `parameters`.
//!
//! The pydantic v2 conventions reproduced are the ones these toolkits
//! exercise; anything else is refused with a [`ToolSourceError`] rather than
//! approximated:
//!
//! * field `title`: the name title-cased, `_` → space; the top-level title
//!   is `parameters`; a field with a default carries it and is not
//!   `required` (`required` is left out when empty);
//! * `str`/`int`/`float`/`bool`/`None` → `string`/`integer`/`number`/
//!   `boolean`/`null`; bare `dict` → an object with
//!   `additionalProperties: true`; `Dict[str, T]` → an object whose
//!   `additionalProperties` is `T`; `List[T]` → an array of `T`;
//!   `Optional`/`Union`/`|` → `anyOf`; `Literal` of several strings (or
//!   ints) → `enum` plus `type`;
//! * a model (a `BaseModel` subclass of the data-model module, bases
//!   followed within it or into a support module such as
//!   `utils/pydantic_utils.py`) → `$ref` into `$defs`, whose entry lists its
//!   fields (`Field(description=..., default=...)`), its cleaned docstring
//!   as `description`, and `additionalProperties: false` when its config is
//!   `ConfigDict(extra="forbid")`;
//! * a `(str, Enum)` class → `$ref` to an entry with its values as `enum`
//!   and `type: string`; a default written as a member is its value;
//! * a field typed as a model or enum keeps the `$ref` with its
//!   `description` and `default` beside it and no `title` (pydantic ≥ 2.9,
//!   the versions the wheel's vectors record);
//! * keys sorted at every level except inside `properties` (definition
//!   order), as pydantic's `GenerateJsonSchema.sort` leaves them: the bytes
//!   the model sees then match the reference's, not just the values.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use ecdysis_env::ToolSpec;

use super::docstring::{self, Docstring};
use super::pysource::{
    Class, Expr, ExprError, FieldDecl, Method, Module, Param, SpecProblem, Src, ToolSourceError,
    cleandoc, normalize_newlines, py_space,
};
use super::tools::{Kind, Toolkit};

/// What the sources are checked against: a native toolkit's class name and
/// its tools (name, parameters, category), whichever toolkit type holds
/// them.
pub(crate) struct NativeTools<'a> {
    class: &'a str,
    tools: Vec<NativeTool<'a>>,
}

struct NativeTool<'a> {
    name: &'a str,
    params: &'a [&'a str],
    kind: Kind,
}

impl<'a> From<&'a Toolkit> for NativeTools<'a> {
    fn from(t: &'a Toolkit) -> Self {
        NativeTools {
            class: t.class,
            tools: t
                .tools
                .iter()
                .map(|d| NativeTool {
                    name: d.name,
                    params: d.params,
                    kind: d.kind,
                })
                .collect(),
        }
    }
}

impl<'a> From<&'a super::telecom::Kit> for NativeTools<'a> {
    fn from(k: &'a super::telecom::Kit) -> Self {
        NativeTools {
            class: k.class,
            tools: k
                .tools()
                .filter_map(|f| {
                    f.tool.map(|kind| NativeTool {
                        name: f.name,
                        params: f.params,
                        kind,
                    })
                })
                .collect(),
        }
    }
}

/// A Python source file: its path in the wheel and its text.
#[derive(Clone, Copy)]
pub(crate) struct Source<'s> {
    pub(crate) file: &'s str,
    pub(crate) text: &'s str,
}

/// Why an annotation, a default or a decorator gets no schema here: the
/// pydantic conventions this module reproduces stop short of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The expression itself could not be read.
    #[error(transparent)]
    Expr(#[from] ExprError),
    /// A decorator named `is_tool` that is not `is_tool(ToolType.X)`.
    #[error("expected `is_tool(ToolType.READ|WRITE|THINK|GENERIC)`")]
    IsToolArguments,
    /// Aliases referring to aliases more than 16 deep.
    #[error("type aliases nest too deeply (a cycle?)")]
    AliasDepth,
    /// `Optional`, `Union`, `Literal` or `Annotated` (as written) without
    /// `[...]`.
    #[error("`{0}` without its arguments")]
    BareGeneric(String),
    /// `x[...]` where `x` is not a name.
    #[error("subscript of a non-name")]
    SubscriptOfNonName,
    /// `List`, `Dict` or `Optional` with the wrong number of arguments.
    #[error("`{base}[...]` takes {want} argument(s), found {found}")]
    Arity {
        /// The generic, as written.
        base: String,
        /// The arguments it takes.
        want: usize,
        /// The arguments given.
        found: usize,
    },
    /// `Literal[...]` of something other than strings and integers.
    #[error("Literal values other than strings and integers are not supported")]
    LiteralValue,
    /// A generic with no rule here (its name).
    #[error("`{0}[...]` has no schema rule here")]
    NoRule(String),
    /// `"Model"` as an annotation.
    #[error("string (forward-reference) annotations are not supported")]
    ForwardReference,
    /// An expression that is no type (a call, a number, ...).
    #[error("not a type")]
    NotAType,
    /// A name neither built in nor defined by the modules.
    #[error("unknown type `{0}`")]
    UnknownType(String),
    /// What is wrong with a module-level alias the annotation refers to.
    #[error("alias `{name}` ({file}:{line}): {reason}")]
    InAlias {
        /// The alias.
        name: String,
        /// The module defining it.
        file: String,
        /// Its line there.
        line: usize,
        /// What is wrong with its value.
        reason: Box<SchemaError>,
    },
    /// A type whose schema is not an object (cannot take a title).
    #[error("no object schema")]
    NoObjectSchema,
    /// A default written as `Class.MEMBER` that names no member of a
    /// `(str, Enum)` class in scope.
    #[error("default `{0}` is not a member of an enum in scope")]
    UnknownMember(String),
    /// `Dict[K, V]` with `K` other than `str`.
    #[error("dict keys other than `str` are not supported")]
    DictKey,
    /// `Dict[str, Any]`.
    #[error("dict values typed `Any` are not supported")]
    DictAny,
    /// `Any` as a member of a union.
    #[error("`Any` inside a union is not supported")]
    AnyInUnion,
    /// A one-value or mixed `Literal`.
    #[error("only a Literal of two or more strings (or integers) is supported")]
    LiteralShape,
    /// A model name with no class behind it.
    #[error("unknown model `{0}`")]
    UnknownModel(String),
    /// A field of a model (both named) whose annotation or value is refused.
    #[error("model `{model}`, field `{field}`: {reason}")]
    InField {
        /// The model.
        model: String,
        /// The field.
        field: String,
        /// What is wrong with it.
        reason: Box<SchemaError>,
    },
    /// `Field(a, b, ...)`.
    #[error("`Field` with more than one positional argument")]
    FieldPositional,
    /// A `Field` keyword other than `description` and `default` (its name).
    #[error("`Field` argument `{0}` is not supported")]
    FieldArgument(String),
    /// A default other than `None`, a string, an integer, a boolean or an
    /// enum member.
    #[error("only None, string, integer, boolean and enum-member defaults are supported")]
    Default,
}

/// τ²'s `ToolType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ToolType {
    Read,
    Write,
    Think,
    Generic,
}

/// The specs of every `@is_tool` method of the toolkit class in `tools`,
/// in the class's order (the reference's `ToolKitBase.tools` order),
/// checked against the native `toolkit`: same tools, same parameters, same
/// category. `mutates` is the decorator's `ToolType.WRITE`.
///
/// `support` holds modules a model's base class may come from (imported
/// by the data model, e.g. τ²'s `BaseModelNoExtra`); their classes are
/// bases only, never field types.
pub(crate) fn tool_specs(
    tools: Source,
    models: Source,
    support: &[Source],
    toolkit: &NativeTools,
) -> Result<Vec<ToolSpec>, ToolSourceError> {
    let tools_text = normalize_newlines(tools.text);
    let models_text = normalize_newlines(models.text);
    let support_texts: Vec<(&str, std::borrow::Cow<str>)> = support
        .iter()
        .map(|s| (s.file, normalize_newlines(s.text)))
        .collect();
    let tm = Module::parse(tools.file, &tools_text)?;
    let mm = Module::parse(models.file, &models_text)?;
    let sm = support_texts
        .iter()
        .map(|(file, text)| Module::parse(file, text))
        .collect::<Result<Vec<_>, _>>()?;
    let kit = toolkit_class(&tm, toolkit)?;
    let mut specs: Vec<ToolSpec> = Vec::new();
    for (k, method) in kit.methods.iter().enumerate() {
        if kit.methods[..k].iter().any(|m| m.name == method.name) {
            // Python would keep the first position with the last body.
            return Err(ToolSourceError::new(
                &tm.file,
                method.line,
                SpecProblem::Unsupported(format!("method `{}` is defined twice", method.name)),
            ));
        }
        let Some(kind) = tool_type(&tm, method)? else {
            continue; // a helper, not a tool
        };
        let modules = Modules {
            tools: &tm,
            models: &mm,
            support: &sm,
        };
        let spec = build(modules, method, kind, toolkit).map_err(|e| e.in_tool(method.name))?;
        specs.push(spec);
    }
    if let Some(missing) = toolkit
        .tools
        .iter()
        .find(|t| !specs.iter().any(|s| s.name == t.name))
    {
        return Err(ToolSourceError::new(
            &tm.file,
            kit.line,
            SpecProblem::Toolkit(format!(
                "`{}` is implemented natively but {} has no `@is_tool` method of that name",
                missing.name, kit.name
            )),
        ));
    }
    Ok(specs)
}

/// The one class deriving from `ToolKitBase`; it must be the native
/// toolkit's class and derive from nothing else (whose tools would merge in).
fn toolkit_class<'m, 'a>(
    tm: &'m Module<'a>,
    toolkit: &NativeTools,
) -> Result<&'m Class<'a>, ToolSourceError> {
    let is_base = |s: &Src| matches!(s.expr(), Ok(Expr::Name(n)) if n == "ToolKitBase");
    let kits: Vec<&Class> = tm
        .classes
        .iter()
        .filter(|c| c.bases.iter().any(is_base))
        .collect();
    let unsupported =
        |line, what: String| ToolSourceError::new(&tm.file, line, SpecProblem::Unsupported(what));
    let kit = match kits.as_slice() {
        [one] => *one,
        [] => return Err(unsupported(1, "no class derives from `ToolKitBase`".into())),
        [_, second, ..] => {
            return Err(unsupported(
                second.line,
                "more than one class derives from `ToolKitBase`".into(),
            ));
        }
    };
    if kit.name != toolkit.class {
        return Err(ToolSourceError::new(
            &tm.file,
            kit.line,
            SpecProblem::Toolkit(format!(
                "the toolkit class is `{}`, the native one emulates `{}`",
                kit.name, toolkit.class
            )),
        ));
    }
    if kit.bases.len() != 1 || !kit.keywords.is_empty() {
        return Err(unsupported(
            kit.line,
            format!("`{}` derives from more than `ToolKitBase`", kit.name),
        ));
    }
    Ok(kit)
}

/// The method's `@is_tool(...)` category, `None` for a helper. A tool with
/// other decorators is refused: they could hide or rename it.
fn tool_type(tm: &Module, method: &Method) -> Result<Option<ToolType>, ToolSourceError> {
    let mut found = None;
    let mut others = Vec::new();
    for d in &method.decorators {
        let fail =
            |problem| Err(ToolSourceError::new(&tm.file, d.line, problem).in_tool(method.name));
        let expr = match d.expr() {
            Ok(e) => e,
            Err(reason) => {
                return fail(SpecProblem::Expression {
                    text: format!("@{}", d.text()),
                    reason: Box::new(reason.into()),
                });
            }
        };
        let named_is_tool =
            |e: &Expr| matches!(e, Expr::Name(n) if n == "is_tool" || n.ends_with(".is_tool"));
        match &expr {
            Expr::Call(f, args, kwargs) if named_is_tool(f.as_ref()) => {
                let kind = match (f.as_ref(), args.as_slice(), kwargs.as_slice()) {
                    (Expr::Name(n), [], []) if n == "is_tool" => Some(ToolType::Read),
                    (Expr::Name(n), [arg], []) if n == "is_tool" => category(arg),
                    (Expr::Name(n), [], [(key, arg)]) if n == "is_tool" && key == "tool_type" => {
                        category(arg)
                    }
                    _ => None,
                };
                let Some(kind) = kind else {
                    return fail(SpecProblem::Expression {
                        text: format!("@{}", d.text()),
                        reason: Box::new(SchemaError::IsToolArguments),
                    });
                };
                if found.replace(kind).is_some() {
                    return fail(SpecProblem::Unsupported("`@is_tool` applied twice".into()));
                }
            }
            e if named_is_tool(e) => {
                return fail(SpecProblem::Unsupported(
                    "`@is_tool` without parentheses (it would take the method as its tool type)"
                        .into(),
                ));
            }
            _ => others.push(format!("@{}", d.text())),
        }
    }
    if found.is_some() && !others.is_empty() {
        return Err(ToolSourceError::new(
            &tm.file,
            method.line,
            SpecProblem::Unsupported(format!(
                "a tool with other decorators ({})",
                others.join(", ")
            )),
        )
        .in_tool(method.name));
    }
    Ok(found)
}

fn category(e: &Expr) -> Option<ToolType> {
    match e {
        Expr::Name(n) => match n.as_str() {
            "ToolType.READ" => Some(ToolType::Read),
            "ToolType.WRITE" => Some(ToolType::Write),
            "ToolType.THINK" => Some(ToolType::Think),
            "ToolType.GENERIC" => Some(ToolType::Generic),
            _ => None,
        },
        _ => None,
    }
}

/// The modules one derivation reads.
#[derive(Clone, Copy)]
struct Modules<'m, 'a> {
    tools: &'m Module<'a>,
    models: &'m Module<'a>,
    support: &'m [Module<'a>],
}

fn build(
    modules: Modules,
    method: &Method,
    kind: ToolType,
    toolkit: &NativeTools,
) -> Result<ToolSpec, ToolSourceError> {
    let tm = modules.tools;
    let at = |line, problem| ToolSourceError::new(&tm.file, line, problem);
    let native = toolkit
        .tools
        .iter()
        .find(|t| t.name == method.name)
        .ok_or_else(|| {
            at(
                method.line,
                SpecProblem::Toolkit("declared in the sources but not implemented natively".into()),
            )
        })?;
    let params = method
        .params()
        .map_err(|(line, msg)| at(line, SpecProblem::Syntax(msg)))?;
    // A bound method's signature drops `self`.
    let params: &[Param] = match params.split_first() {
        Some((first, rest)) if first.name == "self" && first.default.is_none() => rest,
        _ => {
            return Err(at(
                method.line,
                SpecProblem::Unsupported(
                    "the first parameter is not `self` (static and class methods are not handled)"
                        .into(),
                ),
            ));
        }
    };
    let names: Vec<&str> = params.iter().map(|p| p.name).collect();
    if names != native.params {
        return Err(at(
            method.line,
            SpecProblem::Toolkit(format!(
                "parameters ({}) differ from the native ones ({})",
                names.join(", "),
                native.params.join(", ")
            )),
        ));
    }
    let same_kind = matches!(
        (kind, native.kind),
        (ToolType::Read, Kind::Read)
            | (ToolType::Write, Kind::Write)
            | (ToolType::Generic, Kind::Generic)
    );
    if !same_kind {
        return Err(at(
            method.line,
            SpecProblem::Toolkit(format!(
                "the decorator says {kind:?}, the native tool is {:?}",
                native.kind
            )),
        ));
    }
    let doc = match &method.doc {
        None => Docstring::default(),
        Some(src) => {
            let raw = src.string().map_err(|reason| {
                at(
                    src.line,
                    SpecProblem::Expression {
                        text: src.text(),
                        reason: Box::new(reason.into()),
                    },
                )
            })?;
            docstring::parse(&raw).map_err(|e| at(src.line, SpecProblem::Docstring(e)))?
        }
    };
    let mut schema = SchemaGen {
        tools: tm,
        models: modules.models,
        support: modules.support,
        defs: BTreeMap::new(),
        building: Vec::new(),
    };
    Ok(ToolSpec::new(
        method.name,
        doc.description(method.name),
        schema.parameters(params, &doc)?,
        kind == ToolType::Write,
    ))
}

/// A resolved annotation.
#[derive(Clone, Debug, PartialEq)]
enum Ty {
    Any,
    Str,
    Int,
    Float,
    Bool,
    Null,
    /// `dict` (`None`) or `Dict[K, V]`.
    Dict(Option<Box<(Ty, Ty)>>),
    /// `list` (`None`) or `List[T]`.
    List(Option<Box<Ty>>),
    Union(Vec<Ty>),
    Literal(Vec<Lit>),
    /// A model class: its name and whether it lives in the tools module
    /// (else the data-model module).
    Model(String, bool),
    /// A `(str, Enum)` class, named and placed as a model is.
    Enum(String, bool),
}

#[derive(Clone, Debug, PartialEq)]
enum Lit {
    Str(String),
    Int(i64),
}

/// A failure inside schema generation: a bare reason the caller locates at
/// the annotation it was resolving, or an error already located elsewhere
/// (a model's field).
enum Fail {
    Here(SchemaError),
    Located(ToolSourceError),
}

impl From<ToolSourceError> for Fail {
    fn from(e: ToolSourceError) -> Self {
        Fail::Located(e)
    }
}

impl Fail {
    fn at(self, file: &str, src: &Src) -> ToolSourceError {
        match self {
            Fail::Here(reason) => ToolSourceError::new(
                file,
                src.line,
                SpecProblem::Annotation {
                    annotation: src.text(),
                    reason: Box::new(reason),
                },
            ),
            Fail::Located(e) => e,
        }
    }
}

/// Builds one tool's parameter schema; `$defs` collects the models it
/// references.
struct SchemaGen<'m, 'a> {
    tools: &'m Module<'a>,
    models: &'m Module<'a>,
    support: &'m [Module<'a>],
    defs: BTreeMap<String, Value>,
    /// Models being defined, so a recursive one refers to itself.
    building: Vec<String>,
}

impl SchemaGen<'_, '_> {
    fn parameters(&mut self, params: &[Param], doc: &Docstring) -> Result<Value, ToolSourceError> {
        let file = self.tools.file.clone();
        let mut props = Map::new();
        let mut required = Vec::new();
        for p in params {
            let Some(ann) = &p.annotation else {
                return Err(ToolSourceError::new(
                    &file,
                    p.line,
                    SpecProblem::Unsupported(format!("parameter `{}` has no annotation", p.name)),
                ));
            };
            let ty = ann
                .expr()
                .map_err(SchemaError::from)
                .and_then(|e| self.resolve(&e, true, 0))
                .map_err(|r| Fail::Here(r).at(&file, ann))?;
            let default = match &p.default {
                None => None,
                Some(d) => d
                    .expr()
                    .map_err(SchemaError::from)
                    .and_then(|e| self.default_value(&e, true))
                    .map_err(|reason| {
                        ToolSourceError::new(
                            &file,
                            d.line,
                            SpecProblem::Expression {
                                text: d.text(),
                                reason: Box::new(reason),
                            },
                        )
                    })?,
            };
            let schema = self
                .field(p.name, &ty, doc.param(p.name), default.clone())
                .map_err(|f| f.at(&file, ann))?;
            if default.is_none() {
                required.push(Value::from(p.name));
            }
            props.insert(p.name.to_string(), schema);
        }
        let mut out = Map::new();
        if !self.defs.is_empty() {
            let defs = std::mem::take(&mut self.defs);
            out.insert("$defs".into(), Value::Object(defs.into_iter().collect()));
        }
        out.insert("properties".into(), Value::Object(props));
        if !required.is_empty() {
            out.insert("required".into(), Value::Array(required));
        }
        out.insert("title".into(), "parameters".into());
        out.insert("type".into(), "object".into());
        Ok(pydantic_order(Value::Object(out), None))
    }

    /// A field's schema: its type's, plus title, description and default.
    fn field(
        &mut self,
        name: &str,
        ty: &Ty,
        description: Option<&str>,
        default: Option<Value>,
    ) -> Result<Value, Fail> {
        let mut schema = self.schema(ty)?;
        let Some(obj) = schema.as_object_mut() else {
            return Err(Fail::Here(SchemaError::NoObjectSchema));
        };
        // A `$ref` field gets no title: the definition has one.
        if !obj.contains_key("$ref") {
            obj.insert("title".into(), title(name).into());
        }
        if let Some(d) = description {
            obj.insert("description".into(), d.into());
        }
        if let Some(v) = default {
            obj.insert("default".into(), v);
        }
        Ok(schema)
    }

    fn schema(&mut self, ty: &Ty) -> Result<Value, Fail> {
        Ok(match ty {
            Ty::Any => json!({}),
            Ty::Str => json!({"type": "string"}),
            Ty::Int => json!({"type": "integer"}),
            Ty::Float => json!({"type": "number"}),
            Ty::Bool => json!({"type": "boolean"}),
            Ty::Null => json!({"type": "null"}),
            Ty::Dict(None) => json!({"additionalProperties": true, "type": "object"}),
            Ty::Dict(Some(kv)) => {
                if kv.0 != Ty::Str {
                    return Err(Fail::Here(SchemaError::DictKey));
                }
                if kv.1 == Ty::Any {
                    return Err(Fail::Here(SchemaError::DictAny));
                }
                json!({"additionalProperties": self.schema(&kv.1)?, "type": "object"})
            }
            Ty::List(None) => json!({"items": {}, "type": "array"}),
            Ty::List(Some(t)) => json!({"items": self.schema(t)?, "type": "array"}),
            Ty::Union(members) => {
                if members.contains(&Ty::Any) {
                    return Err(Fail::Here(SchemaError::AnyInUnion));
                }
                let any_of = members
                    .iter()
                    .map(|m| self.schema(m))
                    .collect::<Result<Vec<_>, _>>()?;
                json!({ "anyOf": any_of })
            }
            Ty::Literal(values) => {
                let all_str = values.iter().all(|v| matches!(v, Lit::Str(_)));
                let all_int = values.iter().all(|v| matches!(v, Lit::Int(_)));
                if values.len() < 2 || !(all_str || all_int) {
                    // pydantic writes a one-value Literal as `const` (and
                    // mixed ones without `type`); no tool uses either.
                    return Err(Fail::Here(SchemaError::LiteralShape));
                }
                let values: Vec<Value> = values
                    .iter()
                    .map(|v| match v {
                        Lit::Str(s) => Value::from(s.as_str()),
                        Lit::Int(n) => Value::from(*n),
                    })
                    .collect();
                json!({"enum": values, "type": if all_str { "string" } else { "integer" }})
            }
            Ty::Model(name, in_tools) => {
                self.define(name, *in_tools)?;
                json!({ "$ref": format!("#/$defs/{name}") })
            }
            Ty::Enum(name, in_tools) => {
                self.define_enum(name, *in_tools)?;
                json!({ "$ref": format!("#/$defs/{name}") })
            }
        })
    }

    /// A default as JSON; `None` for `...` (pydantic's "required"). An
    /// enum member (`Class.MEMBER`) stands for its value, as pydantic
    /// writes it.
    fn default_value(&self, e: &Expr, in_tools: bool) -> Result<Option<Value>, SchemaError> {
        match e {
            Expr::Ellipsis => Ok(None),
            Expr::None => Ok(Some(Value::Null)),
            Expr::Str(s) => Ok(Some(Value::from(s.as_str()))),
            Expr::Int(n) => Ok(Some(Value::from(*n))),
            Expr::Bool(b) => Ok(Some(Value::from(*b))),
            Expr::Name(n) if n.contains('.') => {
                let unknown = || SchemaError::UnknownMember(n.clone());
                let (class, member) = n.rsplit_once('.').ok_or_else(unknown)?;
                let Ok(Ty::Enum(class, enum_in_tools)) = self.named(class, in_tools, 0) else {
                    return Err(unknown());
                };
                let module = if enum_in_tools {
                    self.tools
                } else {
                    self.models
                };
                let members = module
                    .class(&class)
                    .ok_or_else(unknown)
                    .and_then(|c| enum_members(c).map_err(|_| unknown()))?;
                members
                    .into_iter()
                    .find(|(m, _)| *m == member)
                    .map(|(_, v)| Some(Value::from(v)))
                    .ok_or_else(unknown)
            }
            _ => Err(SchemaError::Default),
        }
    }

    /// Adds enum `name` to `$defs`: its values in definition order, an
    /// alias's repeated value included (pydantic lists `__members__`).
    fn define_enum(&mut self, name: &str, in_tools: bool) -> Result<(), Fail> {
        if self.defs.contains_key(name) {
            return Ok(());
        }
        let module = if in_tools { self.tools } else { self.models };
        let class = module
            .class(name)
            .ok_or_else(|| Fail::Here(SchemaError::UnknownModel(name.to_string())))?;
        let members = enum_members(class).map_err(|(line, what)| {
            Fail::Located(ToolSourceError::new(
                &module.file,
                line,
                SpecProblem::Unsupported(format!("enum `{name}`: {what}")),
            ))
        })?;
        let values: Vec<Value> = members.into_iter().map(|(_, v)| Value::from(v)).collect();
        let mut def = Map::new();
        if let Some(doc) = class_doc(module, class)? {
            def.insert("description".into(), doc.into());
        }
        def.insert("enum".into(), Value::Array(values));
        def.insert("title".into(), name.into());
        def.insert("type".into(), "string".into());
        self.defs.insert(name.to_string(), Value::Object(def));
        Ok(())
    }

    /// Resolves an annotation; `in_tools` says which module's names are in
    /// scope (the tools module sees its own and the data model's).
    fn resolve(&self, e: &Expr, in_tools: bool, depth: usize) -> Result<Ty, SchemaError> {
        if depth > 16 {
            return Err(SchemaError::AliasDepth);
        }
        match e {
            Expr::None => Ok(Ty::Null),
            Expr::Name(n) => match n.strip_prefix("typing.").unwrap_or(n) {
                "str" => Ok(Ty::Str),
                "int" => Ok(Ty::Int),
                "float" => Ok(Ty::Float),
                "bool" => Ok(Ty::Bool),
                "dict" | "Dict" => Ok(Ty::Dict(None)),
                "list" | "List" => Ok(Ty::List(None)),
                "Any" => Ok(Ty::Any),
                "Optional" | "Union" | "Literal" | "Annotated" => {
                    Err(SchemaError::BareGeneric(n.clone()))
                }
                _ => self.named(n, in_tools, depth),
            },
            Expr::Or(a, b) => Ok(union(vec![
                self.resolve(a, in_tools, depth)?,
                self.resolve(b, in_tools, depth)?,
            ])),
            Expr::Subscript(base, args) => {
                let Expr::Name(b) = base.as_ref() else {
                    return Err(SchemaError::SubscriptOfNonName);
                };
                let arg = |k: usize| self.resolve(&args[k], in_tools, depth);
                let arity = |n: usize| {
                    if args.len() == n {
                        Ok(())
                    } else {
                        Err(SchemaError::Arity {
                            base: b.clone(),
                            want: n,
                            found: args.len(),
                        })
                    }
                };
                match b.strip_prefix("typing.").unwrap_or(b) {
                    "List" | "list" => {
                        arity(1)?;
                        Ok(Ty::List(Some(Box::new(arg(0)?))))
                    }
                    "Dict" | "dict" => {
                        arity(2)?;
                        Ok(Ty::Dict(Some(Box::new((arg(0)?, arg(1)?)))))
                    }
                    "Optional" => {
                        arity(1)?;
                        Ok(union(vec![arg(0)?, Ty::Null]))
                    }
                    "Union" if !args.is_empty() => {
                        Ok(union((0..args.len()).map(&arg).collect::<Result<_, _>>()?))
                    }
                    "Literal" if !args.is_empty() => {
                        let mut values: Vec<Lit> = Vec::new();
                        for a in args {
                            let v = match a {
                                Expr::Str(s) => Lit::Str(s.clone()),
                                Expr::Int(n) => Lit::Int(*n),
                                _ => return Err(SchemaError::LiteralValue),
                            };
                            // `Literal` drops repeated values.
                            if !values.contains(&v) {
                                values.push(v);
                            }
                        }
                        Ok(Ty::Literal(values))
                    }
                    other => Err(SchemaError::NoRule(other.to_string())),
                }
            }
            Expr::Str(_) => Err(SchemaError::ForwardReference),
            _ => Err(SchemaError::NotAType),
        }
    }

    /// A name defined by a module: a model class, or an alias resolved in
    /// its own module's scope.
    fn named(&self, name: &str, in_tools: bool, depth: usize) -> Result<Ty, SchemaError> {
        let scopes: &[(&Module, bool)] = if in_tools {
            &[(self.tools, true), (self.models, false)]
        } else {
            &[(self.models, false)]
        };
        for &(module, is_tools) in scopes {
            if let Some(class) = module.class(name) {
                return Ok(if is_enum(class) {
                    Ty::Enum(name.to_string(), is_tools)
                } else {
                    Ty::Model(name.to_string(), is_tools)
                });
            }
            if let Some(alias) = module.assign(name) {
                return alias
                    .value
                    .expr()
                    .map_err(SchemaError::from)
                    .and_then(|e| self.resolve(&e, is_tools, depth + 1))
                    .map_err(|r| SchemaError::InAlias {
                        name: name.to_string(),
                        file: module.file.clone(),
                        line: alias.value.line,
                        reason: Box::new(r),
                    });
            }
        }
        Err(SchemaError::UnknownType(name.to_string()))
    }

    /// Adds model `name` to `$defs`.
    fn define(&mut self, name: &str, in_tools: bool) -> Result<(), Fail> {
        if self.defs.contains_key(name) || self.building.iter().any(|b| b == name) {
            return Ok(());
        }
        let module = if in_tools { self.tools } else { self.models };
        let class = module
            .class(name)
            .ok_or_else(|| Fail::Here(SchemaError::UnknownModel(name.to_string())))?;
        self.building.push(name.to_string());
        let (fields, forbid_extra) =
            model_fields(module, class, self.support, 0).map_err(Fail::Located)?;
        let mut props = Map::new();
        let mut required = Vec::new();
        for f in fields {
            let located = |reason: SchemaError| {
                ToolSourceError::new(
                    &module.file,
                    f.line,
                    SpecProblem::Annotation {
                        annotation: f.annotation.text(),
                        reason: Box::new(SchemaError::InField {
                            model: name.to_string(),
                            field: f.name.to_string(),
                            reason: Box::new(reason),
                        }),
                    },
                )
            };
            let ty = f
                .annotation
                .expr()
                .map_err(SchemaError::from)
                .and_then(|e| self.resolve(&e, in_tools, 0))
                .map_err(located)?;
            let (default, description) = self
                .field_value(f.value.as_ref(), in_tools)
                .map_err(located)?;
            let schema = match self.field(f.name, &ty, description.as_deref(), default.clone()) {
                Ok(s) => s,
                Err(Fail::Here(r)) => return Err(Fail::Located(located(r))),
                Err(located_elsewhere) => return Err(located_elsewhere),
            };
            if default.is_none() {
                required.push(Value::from(f.name));
            }
            props.insert(f.name.to_string(), schema);
        }
        let mut def = Map::new();
        if let Some(doc) = class_doc(module, class)? {
            def.insert("description".into(), doc.into());
        }
        if forbid_extra {
            def.insert("additionalProperties".into(), false.into());
        }
        def.insert("properties".into(), Value::Object(props));
        if !required.is_empty() {
            def.insert("required".into(), Value::Array(required));
        }
        def.insert("title".into(), name.into());
        def.insert("type".into(), "object".into());
        self.building.pop();
        self.defs.insert(name.to_string(), Value::Object(def));
        Ok(())
    }
}

/// A model's fields, inherited ones first, and whether it forbids extra
/// keys; a redefined field keeps its inherited position (class namespaces
/// merge like dicts). A base is `BaseModel`, a model of the same module, or
/// a class of a `support` module that adds no fields (its annotations would
/// resolve in another scope). The one config understood is
/// `model_config = ConfigDict(extra="forbid")`, inherited as pydantic
/// merges configs; anything else that could change the schema (other
/// config, validators, class keywords, other bases) is refused.
fn model_fields<'m, 'a>(
    module: &'m Module<'a>,
    class: &'m Class<'a>,
    support: &'m [Module<'a>],
    depth: usize,
) -> Result<(Vec<&'m FieldDecl<'a>>, bool), ToolSourceError> {
    let unsupported = |line, what: String| {
        ToolSourceError::new(
            &module.file,
            line,
            SpecProblem::Unsupported(format!("model `{}`: {what}", class.name)),
        )
    };
    if depth > 16 {
        return Err(unsupported(
            class.line,
            "base classes nest too deeply".into(),
        ));
    }
    if let Some((key, _)) = class.keywords.first() {
        return Err(unsupported(class.line, format!("class keyword `{key}=`")));
    }
    if let Some((line, what)) = class.others.first() {
        return Err(unsupported(*line, format!("{what} may change its schema")));
    }
    if let Some(m) = class.methods.iter().find(|m| !m.decorators.is_empty()) {
        return Err(unsupported(
            m.line,
            format!("decorated method `{}` may change its schema", m.name),
        ));
    }
    let mut forbid_extra = false;
    let mut fields: Vec<&FieldDecl> = Vec::new();
    match class.bases.as_slice() {
        [base] => match base.expr() {
            Ok(Expr::Name(n)) if n == "BaseModel" || n == "pydantic.BaseModel" => {}
            Ok(Expr::Name(n)) if module.class(&n).is_some() => {
                let parent = module.class(&n).unwrap_or(class);
                (fields, forbid_extra) = model_fields(module, parent, support, depth + 1)?;
            }
            Ok(Expr::Name(n)) if support.iter().any(|m| m.class(&n).is_some()) => {
                let (home, parent) = support
                    .iter()
                    .find_map(|m| m.class(&n).map(|c| (m, c)))
                    .unwrap_or((module, class));
                let (inherited, forbid) = model_fields(home, parent, &[], depth + 1)?;
                if !inherited.is_empty() {
                    return Err(unsupported(
                        base.line,
                        format!(
                            "base `{n}` ({}) has fields, which are not followed across modules",
                            home.file
                        ),
                    ));
                }
                forbid_extra = forbid;
            }
            _ => {
                return Err(unsupported(
                    base.line,
                    format!(
                        "base `{}` is not a model this reader can follow",
                        base.text()
                    ),
                ));
            }
        },
        _ => {
            return Err(unsupported(
                class.line,
                "only a single base class (BaseModel or a model of the same module) is supported"
                    .into(),
            ));
        }
    }
    for a in &class.assigns {
        let forbid = matches!(
            a.value.expr(),
            Ok(Expr::Call(f, args, kwargs))
                if matches!(f.as_ref(), Expr::Name(n) if n == "ConfigDict" || n == "pydantic.ConfigDict")
                    && args.is_empty()
                    && matches!(kwargs.as_slice(), [(k, Expr::Str(v))] if k == "extra" && v == "forbid")
        );
        if a.name == "model_config" && forbid {
            forbid_extra = true;
        } else {
            return Err(unsupported(
                a.value.line,
                format!(
                    "`{} = {}` may change its schema (only `model_config = ConfigDict(extra=\"forbid\")` is understood)",
                    a.name,
                    a.value.text()
                ),
            ));
        }
    }
    for f in &class.fields {
        match fields.iter_mut().find(|g| g.name == f.name) {
            Some(slot) => *slot = f,
            None => fields.push(f),
        }
    }
    Ok((fields, forbid_extra))
}

impl SchemaGen<'_, '_> {
    /// A field's `= value`: `Field(default, description=..., default=...)`
    /// or a plain default. Returns the default (`None` when required) and
    /// the description.
    fn field_value(
        &self,
        value: Option<&Src>,
        in_tools: bool,
    ) -> Result<(Option<Value>, Option<String>), SchemaError> {
        let Some(src) = value else {
            return Ok((None, None));
        };
        match src.expr()? {
            Expr::Call(f, args, kwargs) if matches!(f.as_ref(), Expr::Name(n) if n == "Field" || n == "pydantic.Field") =>
            {
                if args.len() > 1 {
                    return Err(SchemaError::FieldPositional);
                }
                let mut default = match args.first() {
                    Some(a) => self.default_value(a, in_tools)?,
                    None => None,
                };
                let mut description = None;
                for (key, v) in &kwargs {
                    match (key.as_str(), v) {
                        ("description", Expr::Str(s)) => description = Some(s.clone()),
                        ("default", v) => default = self.default_value(v, in_tools)?,
                        (other, _) => {
                            return Err(SchemaError::FieldArgument(other.to_string()));
                        }
                    }
                }
                Ok((default, description))
            }
            e => Ok((self.default_value(&e, in_tools)?, None)),
        }
    }
}

/// A class's cleaned docstring, if it has one.
fn class_doc(module: &Module, class: &Class) -> Result<Option<String>, Fail> {
    let Some(doc) = &class.doc else {
        return Ok(None);
    };
    let raw = doc.string().map_err(|reason| {
        Fail::Located(ToolSourceError::new(
            &module.file,
            doc.line,
            SpecProblem::Expression {
                text: doc.text(),
                reason: Box::new(reason.into()),
            },
        ))
    })?;
    Ok(Some(cleandoc(&raw)))
}

/// Whether `class` is declared `(str, Enum)` (or with `enum.Enum`).
fn is_enum(class: &Class) -> bool {
    let names: Vec<Option<String>> = class
        .bases
        .iter()
        .map(|b| match b.expr() {
            Ok(Expr::Name(n)) => Some(n),
            _ => None,
        })
        .collect();
    matches!(names.as_slice(), [Some(s), Some(e)] if s == "str" && (e == "Enum" || e == "enum.Enum"))
}

/// The members of a `(str, Enum)` class as (name, value), in definition
/// order; anything else in its body that could add or change members is
/// refused, located at its line.
fn enum_members<'c>(class: &'c Class) -> Result<Vec<(&'c str, String)>, (usize, String)> {
    if let Some((line, what)) = class.others.first() {
        return Err((*line, format!("{what} in the class body")));
    }
    if let Some(f) = class.fields.first() {
        return Err((f.line, format!("annotated attribute `{}`", f.name)));
    }
    if let Some(m) = class.methods.iter().find(|m| !m.decorators.is_empty()) {
        return Err((m.line, format!("decorated method `{}`", m.name)));
    }
    class
        .assigns
        .iter()
        .map(|a| {
            if a.name.starts_with('_') {
                return Err((a.value.line, format!("`{}` is not a plain member", a.name)));
            }
            match a.value.expr() {
                Ok(Expr::Str(v)) => Ok((a.name, v)),
                _ => Err((
                    a.value.line,
                    format!("member `{}` is not a string literal", a.name),
                )),
            }
        })
        .collect()
}

/// `Union[...]` as typing builds it: nested unions flattened, repeats
/// dropped, a single member standing alone.
fn union(members: Vec<Ty>) -> Ty {
    let mut flat: Vec<Ty> = Vec::new();
    for m in members {
        let items = match m {
            Ty::Union(inner) => inner,
            other => vec![other],
        };
        for t in items {
            if !flat.contains(&t) {
                flat.push(t);
            }
        }
    }
    if flat.len() == 1 {
        flat.remove(0)
    } else {
        Ty::Union(flat)
    }
}

/// pydantic's default field title: `name.title().replace('_', ' ').strip()`,
/// with Python's `str.title` (a cased letter is upper-cased after an
/// uncased character, lower-cased after a cased one).
fn title(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut prev_cased = false;
    for c in name.chars() {
        let cased = c.is_lowercase() || c.is_uppercase();
        if !cased {
            out.push(c);
        } else if prev_cased {
            out.extend(c.to_lowercase());
        } else {
            out.extend(c.to_uppercase());
        }
        prev_cased = cased;
    }
    out.replace('_', " ").trim_matches(py_space).to_string()
}

/// pydantic's `GenerateJsonSchema.sort`: keys sorted at every level except
/// directly inside `properties` and `default`.
fn pydantic_order(v: Value, parent: Option<&str>) -> Value {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = m.into_iter().collect();
            if !matches!(parent, Some("properties" | "default")) {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| {
                        let v = pydantic_order(v, Some(&k));
                        (k, v)
                    })
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|x| pydantic_order(x, parent))
                .collect(),
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::super::tools::{Kind, ToolDef, calculate};
    use super::*;

    const MODELS: &str = r#"
from pydantic import BaseModel, Field

Color = Literal["red", "green"]
Shade = Color


class Spot(BaseModel):
    """A place.

    With detail."""

    code: str = Field(description="Spot code.")
    level: Optional[int] = Field(
        None, description="Floor, " "if any."
    )

    def label(self) -> str:
        return self.code


class Tagged(Spot):
    tags: List[str] = Field(description="Labels.")
    code: str = Field(description="Overridden code.")


class Configured(BaseModel):
    model_config = ConfigDict(frozen=True)
    a: int


class Level(str, Enum):
    """How high."""

    LOW = "low"
    HIGH = "high"
    TOP = "high"


class Setting(Strict):
    level: Level = Field(Level.LOW, description="The level.")
    note: Optional[str] = None


class Loose(Padded):
    b: int


class Numbered(str, Enum):
    ONE = 1
"#;

    const BASE: &str = r#"
class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Padded(BaseModel):
    pad: int = 0
"#;

    const TOOLS: &str = r#"
from typing import List, Optional


class DemoTools(ToolKitBase):
    """Demo."""

    def _lookup(self, key: str) -> str:
        """Helper: not a tool.

        Args:
            key: Ignored.
        """
        return key

    @is_tool(ToolType.WRITE)
    def paint(
        self,
        spots: List[Tagged | dict],
        color: Shade,
        note: Optional[str] = None,
        mode: Literal["fast", "slow"] = "fast",
    ) -> str:
        """
        Paint some spots.
        Carefully.

        Args:
            spots: The spots,
                   one per entry.
            color: Which color.
            note: Free text.

        Returns:
            Done.
        """
        return "ok"

    # @is_tool(ToolType.READ)
    # def commented_out(self) -> str:
    #     return ""

    @is_tool()
    def peek(self, flags: dict, count: int = 3, ratio: float | None = None) -> str:
        """Look."""
        return ""

    @is_tool(ToolType.READ)
    def bad(self, x: Callable[[int], str]) -> str:
        """Bad."""

    @is_tool(ToolType.READ)
    def strict(self, x: List[Configured]) -> str:
        """Strict."""
"#;

    fn def(name: &'static str, params: &'static [&'static str], kind: Kind) -> ToolDef {
        ToolDef {
            name,
            params,
            kind,
            run: calculate,
        }
    }

    static DEMO: Toolkit = Toolkit {
        class: "DemoTools",
        tools: &[
            ToolDef {
                name: "paint",
                params: &["spots", "color", "note", "mode"],
                kind: Kind::Write,
                run: calculate,
            },
            ToolDef {
                name: "peek",
                params: &["flags", "count", "ratio"],
                kind: Kind::Read,
                run: calculate,
            },
        ],
    };

    fn specs(tools: &str, toolkit: &Toolkit) -> Result<Vec<ToolSpec>, ToolSourceError> {
        let toolkit = &NativeTools::from(toolkit);
        tool_specs(
            Source {
                file: "demo/tools.py",
                text: tools,
            },
            Source {
                file: "demo/data_model.py",
                text: MODELS,
            },
            &[Source {
                file: "demo/base.py",
                text: BASE,
            }],
            toolkit,
        )
    }

    /// The demo tools without the two broken ones.
    fn good_tools() -> String {
        let cut = TOOLS
            .find("    @is_tool(ToolType.READ)\n    def bad")
            .unwrap();
        TOOLS[..cut].to_string()
    }

    #[test]
    fn derives_specs_in_class_order_skipping_helpers() {
        let got = specs(&good_tools(), &DEMO).unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<&str> = got.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["paint", "peek"]);
        assert!(got[0].mutates && !got[1].mutates);
        assert_eq!(got[0].description, "Paint some spots.\n\nCarefully.");
        assert_eq!(got[1].description, "Look.");
        let want_paint = json!({
            "$defs": {
                "Tagged": {
                    "properties": {
                        "code": {"description": "Overridden code.", "title": "Code", "type": "string"},
                        "level": {
                            "anyOf": [{"type": "integer"}, {"type": "null"}],
                            "default": null,
                            "description": "Floor, if any.",
                            "title": "Level"
                        },
                        "tags": {"description": "Labels.", "items": {"type": "string"}, "title": "Tags", "type": "array"}
                    },
                    "required": ["code", "tags"],
                    "title": "Tagged",
                    "type": "object"
                }
            },
            "properties": {
                "spots": {
                    "description": "The spots,\none per entry.",
                    "items": {"anyOf": [{"$ref": "#/$defs/Tagged"}, {"additionalProperties": true, "type": "object"}]},
                    "title": "Spots",
                    "type": "array"
                },
                "color": {"description": "Which color.", "enum": ["red", "green"], "title": "Color", "type": "string"},
                "note": {
                    "anyOf": [{"type": "string"}, {"type": "null"}],
                    "default": null,
                    "description": "Free text.",
                    "title": "Note"
                },
                "mode": {"default": "fast", "enum": ["fast", "slow"], "title": "Mode", "type": "string"}
            },
            "required": ["spots", "color"],
            "title": "parameters",
            "type": "object"
        });
        // Byte-equal, so key order (sorted, `properties` in definition
        // order) is checked too.
        assert_eq!(
            serde_json::to_string(&got[0].parameters).unwrap(),
            serde_json::to_string(&want_paint).unwrap()
        );
        assert_eq!(
            *got[1].parameters,
            json!({
                "properties": {
                    "flags": {"additionalProperties": true, "title": "Flags", "type": "object"},
                    "count": {"default": 3, "title": "Count", "type": "integer"},
                    "ratio": {"anyOf": [{"type": "number"}, {"type": "null"}], "default": null, "title": "Ratio"}
                },
                "required": ["flags"],
                "title": "parameters",
                "type": "object"
            })
        );
    }

    /// One tool `t(self, <params>)` of toolkit `K`, with its specs derived.
    fn one_tool(
        params: &'static [&'static str],
        signature: &str,
    ) -> Result<ToolSpec, ToolSourceError> {
        let tools = format!(
            "class K(ToolKitBase):\n    @is_tool(ToolType.WRITE)\n    def t(self, {signature}) -> str:\n        \"\"\"T.\"\"\"\n"
        );
        let toolkit = Toolkit {
            class: "K",
            tools: Box::leak(Box::new([def("t", params, Kind::Write)])),
        };
        specs(&tools, &toolkit).map(|mut s| s.remove(0))
    }

    #[test]
    fn enums_defaults_by_member_and_forbidding_bases_are_pydantics() {
        // The expected bytes are pydantic 2.14.4's `model_json_schema()` of
        // the same declarations.
        let got = one_tool(
            &["setting", "level", "floor"],
            "setting: Union[Setting, dict], level: Union[Level, str], floor: Level = Level.HIGH",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let want = r##"{"$defs":{"Level":{"description":"How high.","enum":["low","high","high"],"title":"Level","type":"string"},"Setting":{"additionalProperties":false,"properties":{"level":{"$ref":"#/$defs/Level","default":"low","description":"The level."},"note":{"anyOf":[{"type":"string"},{"type":"null"}],"default":null,"title":"Note"}},"title":"Setting","type":"object"}},"properties":{"setting":{"anyOf":[{"$ref":"#/$defs/Setting"},{"additionalProperties":true,"type":"object"}],"title":"Setting"},"level":{"anyOf":[{"$ref":"#/$defs/Level"},{"type":"string"}],"title":"Level"},"floor":{"$ref":"#/$defs/Level","default":"high"}},"required":["setting","level"],"title":"parameters","type":"object"}"##;
        assert_eq!(serde_json::to_string(&got.parameters).unwrap(), want);
    }

    #[test]
    fn what_enums_and_bases_cannot_express_is_refused_where_it_is_written() {
        let cases: [(&[&str], &str, &str, &str); 3] = [
            (
                &["x"],
                "x: Level = Level.MIDDLE",
                "demo/tools.py",
                "Level.MIDDLE",
            ),
            (
                &["x"],
                "x: Numbered",
                "demo/data_model.py",
                "not a string literal",
            ),
            (
                &["x"],
                "x: Loose",
                "demo/data_model.py",
                "not followed across modules",
            ),
        ];
        for (params, signature, file, needle) in cases {
            let err = one_tool(params, signature).expect_err(signature);
            assert_eq!(err.file, file, "{signature}: {err}");
            assert!(err.to_string().contains(needle), "{signature}: {err}");
        }
    }

    #[test]
    fn model_docstrings_become_descriptions() {
        let tools = "class K(ToolKitBase):\n    @is_tool(ToolType.READ)\n    def t(self, s: List[Spot]) -> str:\n        \"\"\"T.\"\"\"\n";
        static K: Toolkit = Toolkit {
            class: "K",
            tools: &[ToolDef {
                name: "t",
                params: &["s"],
                kind: Kind::Read,
                run: calculate,
            }],
        };
        let got = specs(tools, &K).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            got[0].parameters["$defs"]["Spot"]["description"],
            "A place.\n\nWith detail."
        );
        assert_eq!(got[0].parameters["properties"]["s"]["title"], "S");
    }

    #[test]
    fn an_unparseable_annotation_is_a_typed_error() {
        static WITH_BAD: Toolkit = Toolkit {
            class: "DemoTools",
            tools: &[
                ToolDef {
                    name: "paint",
                    params: &["spots", "color", "note", "mode"],
                    kind: Kind::Write,
                    run: calculate,
                },
                ToolDef {
                    name: "peek",
                    params: &["flags", "count", "ratio"],
                    kind: Kind::Read,
                    run: calculate,
                },
                ToolDef {
                    name: "bad",
                    params: &["x"],
                    kind: Kind::Read,
                    run: calculate,
                },
            ],
        };
        let err = specs(TOOLS, &WITH_BAD).unwrap_err();
        assert_eq!(err.file, "demo/tools.py");
        assert_eq!(err.tool.as_deref(), Some("bad"));
        let line = TOOLS.lines().position(|l| l.contains("def bad")).unwrap() + 1;
        assert_eq!(err.line, line);
        match &err.problem {
            SpecProblem::Annotation { annotation, .. } => {
                assert_eq!(annotation, "Callable[[int], str]")
            }
            other => panic!("{other:?}"),
        }
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "demo/tools.py:{line}: tool `bad`: cannot derive a JSON schema for `Callable[[int], str]`"
            )),
            "{text}"
        );
    }

    #[test]
    fn a_model_with_config_is_refused_at_its_line() {
        let cut = TOOLS
            .find("    @is_tool(ToolType.READ)\n    def bad")
            .unwrap();
        let end = TOOLS
            .find("    @is_tool(ToolType.READ)\n    def strict")
            .unwrap();
        let tools = format!("{}{}", &TOOLS[..cut], &TOOLS[end..]);
        static WITH_STRICT: Toolkit = Toolkit {
            class: "DemoTools",
            tools: &[
                ToolDef {
                    name: "paint",
                    params: &["spots", "color", "note", "mode"],
                    kind: Kind::Write,
                    run: calculate,
                },
                ToolDef {
                    name: "peek",
                    params: &["flags", "count", "ratio"],
                    kind: Kind::Read,
                    run: calculate,
                },
                ToolDef {
                    name: "strict",
                    params: &["x"],
                    kind: Kind::Read,
                    run: calculate,
                },
            ],
        };
        let err = specs(&tools, &WITH_STRICT).unwrap_err();
        assert_eq!(err.file, "demo/data_model.py");
        assert_eq!(err.tool.as_deref(), Some("strict"));
        assert!(matches!(err.problem, SpecProblem::Unsupported(_)), "{err}");
        assert!(err.to_string().contains("model_config"), "{err}");
    }

    #[test]
    fn disagreements_with_the_native_toolkit_are_refused() {
        let tools = good_tools();
        static MISSING: Toolkit = Toolkit {
            class: "DemoTools",
            tools: &[ToolDef {
                name: "paint",
                params: &["spots", "color", "note", "mode"],
                kind: Kind::Write,
                run: calculate,
            }],
        };
        let err = specs(&tools, &MISSING).unwrap_err();
        assert_eq!(err.tool.as_deref(), Some("peek"));
        assert!(matches!(err.problem, SpecProblem::Toolkit(_)), "{err}");

        let wrong = [
            def("paint", &["spots", "color", "note", "mode"], Kind::Read),
            def("peek", &["flags", "count", "ratio"], Kind::Read),
        ];
        let toolkit = Toolkit {
            class: "DemoTools",
            tools: Box::leak(Box::new(wrong)),
        };
        let err = specs(&tools, &toolkit).unwrap_err();
        assert!(
            err.to_string().contains("the decorator says Write"),
            "{err}"
        );

        let renamed = Toolkit {
            class: "OtherTools",
            tools: DEMO.tools,
        };
        assert!(matches!(
            specs(&tools, &renamed).unwrap_err().problem,
            SpecProblem::Toolkit(_)
        ));

        let extra = Box::leak(Box::new([
            def("paint", &["spots", "color", "note", "mode"], Kind::Write),
            def("peek", &["flags", "count", "ratio"], Kind::Read),
            def("gone", &[], Kind::Read),
        ]));
        let err = specs(
            &tools,
            &Toolkit {
                class: "DemoTools",
                tools: extra,
            },
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("`gone` is implemented natively"),
            "{err}"
        );
    }

    #[test]
    fn titles_follow_python_str_title() {
        assert_eq!(title("user_id"), "User Id");
        assert_eq!(title("address1"), "Address1");
        assert_eq!(title("a1b_cD"), "A1B Cd");
        assert_eq!(title("type_"), "Type");
    }
}
