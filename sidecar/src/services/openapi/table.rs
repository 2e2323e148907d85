//! The admin listener's own operations: probes, metrics, this document, the read routes, the
//! response cache and the configuration sections.

use serde_json::json;

use super::schemas;
use super::{Access, Answer, Operation};
use crate::services::identity::Role;
use crate::services::pg::Section;

/// An operation of `access` answering `answer`, without body, query or handler errors.
fn op(method: &'static str, path: impl Into<String>, summary: impl Into<String>, access: Access) -> Operation {
    Operation {
        method,
        path: path.into(),
        summary: summary.into(),
        access,
        request: None,
        query: None,
        answer: Answer::Json(json!({"type": "object"})),
        errors: Vec::new(),
    }
}

const VIEWER: Access = Access::Role(Role::Viewer);
const ADMIN: Access = Access::Role(Role::Admin);

/// Who may write a section: key managers manage keys and groups, admins everything else.
pub(super) fn writer_of(section: Section) -> Access {
    match section {
        Section::Keys | Section::Groups => Access::Role(Role::KeyManager),
        _ => ADMIN,
    }
}

/// The operations of the admin listener itself (the identity routes declare theirs).
pub(super) fn operations() -> Vec<Operation> {
    let mut ops = vec![
        Operation { answer: Answer::Text, ..op("get", "/healthz", "Liveness: `ok`", Access::Public) },
        Operation {
            answer: Answer::Text,
            query: Some(schemas::readiness_query()),
            // 503 is the text answer of a probe that fails (see the document).
            errors: vec![503],
            ..op(
                "get",
                "/readyz",
                "Readiness: 200 once a configuration snapshot exists (strict=true: and the store answers)",
                Access::Public,
            )
        },
        Operation {
            answer: Answer::Text,
            ..op("get", "/metrics", "Prometheus metrics (the filter's, named as Envoy names them)", Access::Public)
        },
        op("get", "/openapi.json", "This document", Access::Public),
        Operation {
            query: Some(schemas::usage_query()),
            answer: Answer::Json(schemas::usage_answer()),
            errors: vec![503],
            ..op("get", "/api/v1/usage", "Usage records and totals by key, model and time range", VIEWER)
        },
        Operation {
            query: Some(schemas::requests_query()),
            answer: Answer::Json(schemas::requests_page()),
            errors: vec![503],
            ..op(
                "get",
                "/api/v1/requests",
                "The request log: usage records, newest first, with filters and cursor paging \
                 (400 for a bad cursor or status_class)",
                VIEWER,
            )
        },
        Operation {
            answer: Answer::Json(schemas::requests_of_id()),
            errors: vec![404, 503],
            ..op("get", "/api/v1/requests/{request_id}", "Every record of one request id (404 when none)", VIEWER)
        },
        Operation {
            query: Some(schemas::limits_query()),
            answer: Answer::Json(schemas::limits_answer()),
            errors: vec![503],
            ..op(
                "get",
                "/api/v1/limits",
                "Consumption and remaining amount of every limit (key=, group= to narrow), across replicas",
                VIEWER,
            )
        },
        Operation {
            answer: Answer::Json(schemas::targets_answer()),
            ..op(
                "get",
                "/api/v1/targets",
                "Health (probe verdict, cooldown, consecutive results), engine load and cache figures \
                 (LMCache) of every routing target",
                VIEWER,
            )
        },
        Operation {
            answer: Answer::Json(schemas::kv_answer()),
            ..op(
                "get",
                "/api/v1/kv",
                "Every KV-event stream: connected, last sequence, blocks held, last event age, gaps, replays, restarts",
                VIEWER,
            )
        },
        Operation {
            answer: Answer::Json(schemas::problems_answer()),
            ..op(
                "get",
                "/api/v1/config/problems",
                "Rows dropped from the served snapshot; why the latest change was rejected",
                VIEWER,
            )
        },
        Operation {
            answer: Answer::Json(schemas::cache_status()),
            errors: vec![503],
            ..op(
                "get",
                "/api/v1/cache",
                "The response cache: store, bounds, Redis reachability and entries, recorded purges",
                VIEWER,
            )
        },
        Operation {
            request: Some(schemas::purge_request()),
            answer: Answer::Json(schemas::purge_answer()),
            errors: vec![404, 503],
            ..op(
                "post",
                "/api/v1/cache/purge",
                "Purge cached answers of one key, group (and its keys), model, or all; recorded and sent to every \
                 filter (404 for an unknown name, 503 when Redis cannot be reached: the purge is still recorded)",
                ADMIN,
            )
        },
    ];
    ops.extend(crate::services::analytics::operations());
    for s in Section::ALL {
        ops.extend(section_operations(s));
    }
    ops
}

/// The schema of the path parameter `param` of `path`, when the table knows better than "a
/// string": a section row's name is what the body's name may be.
pub(super) fn path_parameter(path: &str, param: &str) -> Option<serde_json::Value> {
    let s = Section::ALL.into_iter().find(|s| path == format!("/api/v1/{}/{{name}}", s.as_str()))?;
    (param == "name").then(|| schemas::section_name(s))
}

/// A row of a section, for summaries.
fn row_of(s: Section) -> &'static str {
    match s {
        Section::Providers => "a provider",
        Section::Models => "a model",
        Section::Aliases => "an alias",
        Section::Groups => "a key group",
        Section::Keys => "a key",
        Section::Pricing => "a price (named by its upstream model)",
        Section::McpServers => "an MCP server",
        Section::A2aAgents => "an A2A agent",
        Section::Guardrails => "a guardrail policy",
    }
}

/// The five operations of a configuration section.
fn section_operations(s: Section) -> [Operation; 5] {
    let (name, row) = (s.as_str(), row_of(s));
    let (one, many) = (format!("/api/v1/{name}/{{name}}"), format!("/api/v1/{name}"));
    let writer = writer_of(s);
    let generated = if s == Section::Keys { "; without a digest the key is generated and answered once" } else { "" };
    [
        Operation {
            answer: Answer::Json(schemas::section_listing(s)),
            errors: vec![503],
            ..op("get", many.clone(), format!("List {name}"), VIEWER)
        },
        Operation {
            request: Some(schemas::section_body(s)),
            answer: Answer::Json(schemas::written(s == Section::Keys)),
            errors: vec![409, 503],
            ..op("post", many, format!("Create {row} (409 if the name exists){generated}"), writer)
        },
        Operation {
            answer: Answer::Json(schemas::section_row(s)),
            errors: vec![404, 503],
            ..op("get", one.clone(), format!("Read {row} (404 when absent)"), VIEWER)
        },
        Operation {
            request: Some(schemas::section_put_body(s)),
            answer: Answer::Json(schemas::written(s == Section::Keys)),
            errors: vec![409, 503],
            ..op("put", one.clone(), format!("Create or replace {row} (the path names it){generated}"), writer)
        },
        Operation {
            answer: Answer::Json(schemas::written(false)),
            errors: vec![404, 409, 503],
            ..op("delete", one, format!("Delete {row} (409 while other rows depend on it)"), writer)
        },
    ]
}
