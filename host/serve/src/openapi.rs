//! The API's OpenAPI 3.1 document, served at `/v1/openapi.json`. Written
//! by hand next to the routes (a test checks that every route the router
//! answers is described here, and nothing else).

use serde_json::{Value, json};

fn error_response(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

fn quota_response() -> Value {
    json!({
        "description": "A quota is exceeded (429: a rate or a daily amount; 413: a size). The error names the quota; `Retry-After` says when to retry where waiting helps.",
        "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds until the quota allows the request again."}},
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    })
}

fn common(mut responses: Value) -> Value {
    let r = responses.as_object_mut().expect("object");
    r.insert(
        "401".into(),
        error_response("No or an unknown bearer token."),
    );
    r.insert("429".into(), quota_response());
    responses
}

fn op(summary: &str, responses: Value) -> Value {
    json!({"summary": summary, "security": [{"bearer": []}], "responses": common(responses)})
}

fn ok_json(description: &str, schema: Value) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": schema}}})
}

/// The paths the router answers, with their methods (the test checks the
/// router against this list).
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/v1/openapi.json"),
    ("get", "/v1/health"),
    ("get", "/v1/models"),
    ("get", "/v1/usage"),
    ("post", "/v1/harnesses"),
    ("get", "/v1/harnesses"),
    ("get", "/v1/harnesses/{hash}"),
    ("post", "/v1/harnesses/{hash}/grants"),
    ("delete", "/v1/harnesses/{hash}/grants/{tenant}"),
    ("post", "/v1/evaluations"),
    ("get", "/v1/evaluations"),
    ("get", "/v1/evaluations/{id}"),
    ("delete", "/v1/evaluations/{id}"),
    ("get", "/v1/evaluations/{id}/events"),
    ("get", "/v1/evaluations/{id}/trajectories"),
    ("get", "/v1/evaluations/{id}/report"),
];

/// The document.
pub fn document() -> Value {
    let not_found =
        error_response("Not found — also for anything another tenant owns and did not grant.");
    let hash_param = json!({"name": "hash", "in": "path", "required": true, "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"}});
    let id_param =
        json!({"name": "id", "in": "path", "required": true, "schema": {"type": "string"}});
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Ecdysis evaluation service",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Tenants upload WebAssembly harness components and evaluate them on benchmark domains, isolated, metered and audited. Plain HTTP: put TLS in a reverse proxy. Numbers from `sim:` agents are from a simulated agent — not a benchmark result."
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "The tenant token printed once by `ecdysis-host tenant add`."}},
            "schemas": {
                "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
                    "code": {"type": "string", "examples": ["not_found", "quota_exceeded", "invalid", "bad_request", "unauthorized", "timeout", "body_too_large"]},
                    "message": {"type": "string"},
                    "quota": {"type": "string", "description": "The quota that refused the request.", "enum": ["concurrent_episodes", "episodes_per_day", "fuel_per_day", "stored_bytes", "upload_bytes", "max_upload_bytes", "usd_per_day", "requests_per_second", "episodes_per_evaluation", "event_streams_per_tenant"]},
                    "limit": {"type": "number"}, "used": {"type": "number"},
                    "retry_after_seconds": {"type": "integer"}}}}},
                "Harness": {"type": "object", "properties": {
                    "hash": {"type": "string"}, "world": {"type": "string"}, "size": {"type": "integer"},
                    "uploaded_at": {"type": "string", "format": "date-time"},
                    "access": {"type": "string", "enum": ["owned", "granted"]},
                    "passed": {"type": "boolean"}, "inspect": {"type": "object"}, "check": {"type": ["object", "null"]}}},
                "EvaluationRequest": {"type": "object", "required": ["agent"], "additionalProperties": false, "properties": {
                    "harness": {"type": ["string", "null"], "description": "A harness hash you own or were granted; null runs Direct (no harness)."},
                    "domain": {"type": "string", "default": "tau2/retail"},
                    "split": {"type": ["string", "null"]},
                    "tasks": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                    "trials": {"type": "integer", "minimum": 1},
                    "agent": {"type": "string", "description": "A model alias of the operator's (GET /v1/models)."},
                    "user": {"type": "string", "description": "`scripted` (default) or a model alias."},
                    "seed": {"type": "integer", "minimum": 0},
                    "limits": {"type": "object", "additionalProperties": false, "properties": {
                        "fuel_per_hook": {"type": "integer"}, "deadline_ms": {"type": "integer"}, "memory_mib": {"type": "integer"},
                        "max_steps": {"type": "integer"}, "max_errors": {"type": "integer"}}},
                    "policy": {"type": "string", "enum": ["fail-closed", "fail-open"]}}},
                "EvaluationStatus": {"type": "object", "properties": {
                    "id": {"type": "string"}, "state": {"type": "string", "enum": ["running", "done", "cancelled"]},
                    "harness": {"type": ["string", "null"]}, "domain": {"type": "string"}, "agent": {"type": "string"}, "user": {"type": "string"},
                    "created_at": {"type": "string"}, "finished_at": {"type": ["string", "null"]},
                    "progress": {"type": "object", "properties": {"total": {"type": "integer"}, "done": {"type": "integer"}, "running": {"type": "integer"}, "queued": {"type": "integer"}, "cancelled": {"type": "integer"}, "lost": {"type": "integer"}}},
                    "waiting_for": {"type": "string"}, "usd": {"type": "number"}, "fuel": {"type": "integer"},
                    "summary": {"type": "object", "description": "The run summary (as `run` writes summary.json) once done or cancelled."},
                    "note": {"type": "string"}}}
            }
        },
        "paths": {
            "/v1/openapi.json": {"get": {"summary": "This document.", "responses": {"200": ok_json("The OpenAPI document.", json!({"type": "object"}))}}},
            "/v1/health": {"get": {"summary": "Liveness.", "responses": {"200": ok_json("Up.", json!({"type": "object"}))}}},
            "/v1/models": {"get": op("The model aliases you may name as agent or user.", json!({"200": ok_json("Aliases.", json!({"type": "object"}))}))},
            "/v1/usage": {"get": op("Your quotas and today's use.", json!({"200": ok_json("Quotas and use.", json!({"type": "object"}))}))},
            "/v1/harnesses": {
                "post": {
                    "summary": "Upload a component (.wasm bytes). Compiled and checked in a worker process with limits; stored content-addressed.",
                    "security": [{"bearer": []}],
                    "requestBody": {"required": true, "content": {"application/wasm": {"schema": {"type": "string", "format": "binary"}}}},
                    "responses": common(json!({
                        "201": ok_json("Stored: the hash, world, and what inspect and check say.", json!({"$ref": "#/components/schemas/Harness"})),
                        "413": quota_response(),
                        "422": error_response("Not a component this service can run (the reason is given).")}))
                },
                "get": op("Harnesses you own or were granted.", json!({"200": ok_json("Harnesses.", json!({"type": "object", "properties": {"harnesses": {"type": "array", "items": {"$ref": "#/components/schemas/Harness"}}}}))}))
            },
            "/v1/harnesses/{hash}": {"get": {"summary": "One harness.", "security": [{"bearer": []}], "parameters": [hash_param.clone()],
                "responses": common(json!({"200": ok_json("The harness.", json!({"$ref": "#/components/schemas/Harness"})), "404": not_found.clone()}))}},
            "/v1/harnesses/{hash}/grants": {"post": {"summary": "Let another tenant use a harness you own.", "security": [{"bearer": []}], "parameters": [hash_param.clone()],
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "required": ["tenant"], "properties": {"tenant": {"type": "string"}}}}}},
                "responses": common(json!({"201": ok_json("Granted.", json!({"type": "object"})), "404": not_found.clone(), "422": error_response("Invalid grant.")}))}},
            "/v1/harnesses/{hash}/grants/{tenant}": {"delete": {"summary": "Withdraw a grant.", "security": [{"bearer": []}],
                "parameters": [hash_param, {"name": "tenant", "in": "path", "required": true, "schema": {"type": "string"}}],
                "responses": common(json!({"204": {"description": "Withdrawn."}, "404": not_found.clone()}))}},
            "/v1/evaluations": {
                "post": {"summary": "Queue an evaluation; answers its id.", "security": [{"bearer": []}],
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/EvaluationRequest"}}}},
                    "responses": common(json!({"201": ok_json("Queued.", json!({"type": "object", "properties": {"id": {"type": "string"}, "state": {"type": "string"}, "episodes": {"type": "integer"}}})),
                        "404": not_found.clone(), "413": quota_response(), "422": error_response("Invalid request (unknown alias, limit over the maximum, unknown task …).")}))},
                "get": op("Your evaluations, newest first.", json!({"200": ok_json("Evaluations.", json!({"type": "object"}))}))
            },
            "/v1/evaluations/{id}": {
                "get": {"summary": "State, progress, and the summary when done.", "security": [{"bearer": []}], "parameters": [id_param.clone()],
                    "responses": common(json!({"200": ok_json("Status.", json!({"$ref": "#/components/schemas/EvaluationStatus"})), "404": not_found.clone()}))},
                "delete": {"summary": "Cancel: in-flight episodes stop, finished ones are kept.", "security": [{"bearer": []}], "parameters": [id_param.clone()],
                    "responses": common(json!({"200": ok_json("Status after cancelling.", json!({"$ref": "#/components/schemas/EvaluationStatus"})), "404": not_found.clone()}))}
            },
            "/v1/evaluations/{id}/events": {"get": {"summary": "Server-sent events: `episode` per finished episode (id = completion sequence; Last-Event-ID resumes), then `end` with the final status. A tenant may have `[http] event_streams_per_tenant` open at once; more answer 429 (quota `event_streams_per_tenant`).", "security": [{"bearer": []}], "parameters": [id_param.clone()],
                "responses": common(json!({"200": {"description": "An event stream.", "content": {"text/event-stream": {"schema": {"type": "string"}}}}, "404": not_found.clone()}))}},
            "/v1/evaluations/{id}/trajectories": {"get": {"summary": "Finished episodes' trajectories as JSON lines, in episode order.", "security": [{"bearer": []}], "parameters": [id_param.clone()],
                "responses": common(json!({"200": {"description": "JSON lines.", "content": {"application/x-ndjson": {"schema": {"type": "string"}}}}, "404": not_found.clone()}))}},
            "/v1/evaluations/{id}/report": {"get": {"summary": "The HTML report (as `ecdysis-host report` renders a run directory).", "security": [{"bearer": []}], "parameters": [id_param],
                "responses": common(json!({"200": {"description": "A self-contained HTML page, rendered once per version of the evaluation (its state, finished episodes, last completion) and answered from a cache after.", "headers": {"x-report-cache": {"description": "`miss`: rendered for this request; `hit`: from the cache or another request's render.", "schema": {"type": "string", "enum": ["miss", "hit"]}}}, "content": {"text/html": {"schema": {"type": "string"}}}}, "404": not_found}))}}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_documented_and_nothing_else() {
        let doc = document();
        let paths = doc["paths"].as_object().unwrap();
        let mut documented = Vec::new();
        for (path, methods) in paths {
            for method in methods.as_object().unwrap().keys() {
                documented.push((method.clone(), path.clone()));
            }
        }
        documented.sort();
        let mut routes: Vec<(String, String)> = ROUTES
            .iter()
            .map(|(m, p)| (m.to_string(), p.to_string()))
            .collect();
        routes.sort();
        assert_eq!(documented, routes);
    }
}
