//! MCP/A2A limits: fields to counters, kept apart from the model limits, servers' caps.

use super::*;
use crate::config::{Config, RawConfig};
use crate::limits::lease::{admit_leased, Denied};
use crate::limits::tests::MapStore;
use crate::limits::{admit, feed};

const MIN: u64 = 60_000;
const NOW: u64 = 1_000 * MIN;

const YAML: &str = r#"
providers: [{ name: p, kind: openai, base_url: "http://h" }]
models: [{ name: m, targets: [{ provider: p, model: x }] }]
mcp_servers:
  - { name: tools, url: "http://t/mcp", limits: { mcp_requests_per_minute: 3, max_wait_ms: 40 } }
  - { name: free, url: "http://f/mcp" }
a2a_agents: [{ name: echo, url: "http://e/", limits: { tool_calls_per_day: 50 } }]
limits: { requests_per_day: 1000, tool_calls_per_day: 100 }
groups: [{ name: team, models: ["*"], mcp: ["*"], limits: { mcp_requests_per_day: 500 } }]
keys:
  - { name: a, digest: "sha256:1111111111111111111111111111111111111111111111111111111111111111", groups: [team], mcp: ["*"], limits: { requests_per_minute: 5, tool_calls_per_minute: 2 } }
  - { name: b, digest: "sha256:2222222222222222222222222222222222222222222222222222222222222222", mcp: ["*"] }
"#;

fn config(yaml: &str) -> Result<Config, Vec<String>> {
    let raw: RawConfig = serde_saphyr::from_str(yaml).map_err(|e| vec![e.to_string()])?;
    Config::try_from(raw).map_err(|e| e.problems.iter().map(ToString::to_string).collect())
}

fn counters(plan: &[LimitSpec]) -> Vec<&str> {
    plan.iter().map(|s| s.counter.as_str()).collect()
}

#[test]
fn fields_become_counters_of_their_own_apart_from_the_model_limits() {
    let c = config(YAML).unwrap();
    let model = counters(c.limit_plans.for_key(Some(0)));
    assert_eq!(
        model,
        ["ferrogate.limit.key.a.requests.minute", "ferrogate.limit.org..requests.day"],
        "no MCP/A2A field in a model plan"
    );
    let tools = c.limit_plans.for_agent(Some(0), Target::Mcp(0));
    assert_eq!(
        counters(&tools),
        [
            "ferrogate.limit.key.a.tool_calls.minute",
            "ferrogate.limit.group.team.mcp_requests.day",
            "ferrogate.limit.org..tool_calls.day",
            "ferrogate.limit.mcp_server.tools.mcp_requests.minute",
        ],
        "the caller's (key, groups, org), then the server's; no model field"
    );
    let server = tools.last().unwrap();
    assert_eq!(
        (server.scope, server.metric, server.limit, server.max_wait_ms),
        (Scope::McpServer, Metric::McpRequests, 3, 40)
    );
    assert!(matches!(c.limit_plans.for_agent(Some(1), Target::Mcp(1)), Cow::Borrowed(p) if p.len() == 1), "org only");
    assert!(matches!(c.limit_plans.for_agent(Some(1), Target::Mcp(0)), Cow::Owned(_)));
    let echo = c.limit_plans.for_agent(None, Target::A2a(0));
    assert_eq!(
        counters(&echo),
        ["ferrogate.limit.org..tool_calls.day", "ferrogate.limit.a2a_agent.echo.tool_calls.day"]
    );
    let all: Vec<&str> = c.limit_plans.all_specs().map(|s| s.counter.as_str()).collect();
    assert!(
        all.contains(&"ferrogate.limit.a2a_agent.echo.tool_calls.day")
            && all.contains(&"ferrogate.limit.key.a.requests.minute")
    );
    assert!(c.limit_plans.any);
}

#[test]
fn a_request_and_a_tool_call_take_only_their_own_counters() {
    let c = config(YAML).unwrap();
    let plan = c.limit_plans.for_agent(Some(0), Target::Mcp(0));
    let mut store = MapStore::default();
    for _ in 0..2 {
        admit(&plan, Amounts::AGENT_REQUEST, NOW, &mut store).unwrap();
        admit(&plan, Amounts::TOOL_CALL, NOW, &mut store).unwrap();
    }
    let used = |s: &MapStore, name: &str| s.0.get(name).map_or(0, |c| c.own.current);
    assert_eq!(used(&store, "ferrogate.limit.mcp_server.tools.mcp_requests.minute"), 2);
    assert_eq!(used(&store, "ferrogate.limit.group.team.mcp_requests.day"), 2);
    assert_eq!(used(&store, "ferrogate.limit.key.a.tool_calls.minute"), 2);
    assert_eq!(used(&store, "ferrogate.limit.org..tool_calls.day"), 2);
    let refused = admit(&plan, Amounts::TOOL_CALL, NOW, &mut store).unwrap_err();
    assert_eq!((refused.spec, refused.metric, refused.status()), (0, Metric::ToolCalls, 429));
    let (e, retry) = refused.answer(&plan);
    assert_eq!(e.message, "Rate limit reached: key a allows 2 tool calls per minute.");
    assert!(retry.is_some(), "a rate: Retry-After");
    assert_eq!(used(&store, "ferrogate.limit.org..tool_calls.day"), 2, "the org's taken back");
    // The third request still fits the server's 3; the fourth does not, whoever sends it.
    admit(&plan, Amounts::AGENT_REQUEST, NOW, &mut store).unwrap();
    let b = c.limit_plans.for_agent(Some(1), Target::Mcp(0));
    let refused = admit(&b, Amounts::AGENT_REQUEST, NOW, &mut store).unwrap_err();
    assert_eq!(
        refused.answer(&b).0.message,
        "Rate limit reached: MCP server tools allows 3 MCP/A2A requests per minute."
    );
    // No model counter moved, and a model request does not touch these.
    assert!(!store.0.keys().any(|k| k.ends_with(".requests.minute") || k.ends_with(".requests.day")));
    admit(c.limit_plans.for_key(Some(0)), Amounts::model(10, None), NOW, &mut store).unwrap();
    assert_eq!(used(&store, "ferrogate.limit.key.a.tool_calls.minute"), 2);
    assert_eq!(used(&store, "ferrogate.limit.key.a.requests.minute"), 1);
}

#[test]
fn nothing_is_settled_and_a_replay_is_not_counted_again() {
    let c = config(YAML).unwrap();
    let plan = c.limit_plans.for_agent(Some(0), Target::Mcp(0));
    let mut store = MapStore::default();
    let r = admit(&plan, Amounts::TOOL_CALL, NOW, &mut store).unwrap();
    r.settle(&plan, Amounts::model(500, Some(9)), NOW + 1, &mut store);
    assert_eq!(store.0["ferrogate.limit.key.a.tool_calls.minute"].own.current, 1, "a call stays counted");
    crate::limits::readmit(&plan, Amounts::TOOL_CALL, NOW, &mut store).unwrap();
    let mut out = Vec::new();
    admit_leased(&plan, Amounts::TOOL_CALL, NOW, &mut store, true, &mut out).unwrap();
    assert_eq!(store.0["ferrogate.limit.key.a.tool_calls.minute"].own.current, 1, "replays count nothing");
}

#[test]
fn leased_admission_asks_for_the_short_counter() {
    let c = config(YAML).unwrap();
    let plan = c.limit_plans.for_agent(Some(1), Target::Mcp(0));
    let mut store = MapStore::default();
    let mut out = Vec::new();
    let Err(Denied::Short { asks, refusal, wait_ms }) =
        admit_leased(&plan, Amounts::AGENT_REQUEST, NOW, &mut store, false, &mut out)
    else {
        panic!("no lease yet: short");
    };
    let asked: Vec<(&str, u64)> = asks.iter().map(|a| (a.counter.as_str(), a.need)).collect();
    assert_eq!(asked, [("ferrogate.limit.mcp_server.tools.mcp_requests.minute", 1)], "the org's tool calls untouched");
    assert_eq!((refusal.metric, wait_ms), (Metric::McpRequests, 40), "the server's max_wait_ms");
}

#[test]
fn a_servers_block_takes_no_model_field() {
    let bad = YAML
        .replace("mcp_requests_per_minute: 3, max_wait_ms: 40", "tokens_per_day: 9, requests_per_minute: 1")
        .replace("tool_calls_per_day: 50 }", "tool_calls_per_day: 50, cost_usd_per_month: 1, overrun: cut }");
    let problems = config(&bad).unwrap_err();
    let paths: Vec<&str> = problems.iter().map(|p| p.split(": ").next().unwrap()).collect();
    assert_eq!(
        paths,
        [
            "mcp_servers[0].limits.requests_per_minute",
            "mcp_servers[0].limits.tokens_per_day",
            "a2a_agents[0].limits.cost_usd_per_month",
            "a2a_agents[0].limits.overrun",
        ],
        "{problems:#?}"
    );
    assert!(problems[0].contains("is a model limit"), "{}", problems[0]);
    let typo = config(&YAML.replace("max_wait_ms: 40", "tool_call_per_minute: 1")).unwrap_err();
    assert!(typo[0].contains("tool_call_per_minute"), "{typo:?}");
}

#[test]
fn records_say_what_they_counted() {
    let c = config(YAML).unwrap();
    let call = recorded(&c, "mcp:tools", "echo").unwrap();
    assert_eq!(call, (Target::Mcp(0), Amounts { mcp_requests: 1, tool_calls: 1, ..Amounts::default() }));
    assert_eq!(recorded(&c, "a2a:echo", "SendMessage").unwrap().1.tool_calls, 1);
    assert_eq!(recorded(&c, "a2a:echo", "message/stream").unwrap().1.tool_calls, 1);
    assert_eq!(recorded(&c, "a2a:echo", "GetTask").unwrap().1, Amounts::AGENT_REQUEST);
    assert_eq!(recorded(&c, "p", "m"), None, "a model request");
    assert_eq!(recorded(&c, "mcp:gone", "echo"), None);
    let plan = c.limit_plans.for_agent(Some(0), Target::Mcp(0));
    let charged: Vec<(&str, u64)> = feed::charges(&plan, call.1).map(|(s, a)| (s.counter.as_str(), a)).collect();
    assert_eq!(charged.len(), 4, "{charged:?}");
}
