//! Paging of `GET /v1/responses/{id}/input_items` as OpenAI does it: `limit` (1 to 100,
//! default 20), `order` (`asc` or `desc`, default `desc`: the last input item first) and
//! `after` (an item id: the page starts after it in that order). Other parameters
//! (`include`, checked by [`super::include`]) change nothing here.

use crate::openai::ApiError;
use serde_json::{json, Value};

/// The default page size.
pub const DEFAULT_LIMIT: usize = 20;
/// The largest page.
pub const MAX_LIMIT: usize = 100;

/// A page request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paging {
    limit: usize,
    descending: bool,
    after: Option<String>,
}

impl Paging {
    /// Reads the query string (without `?`).
    ///
    /// # Errors
    /// 400 for a `limit` outside 1..=100 or an `order` other than `asc`/`desc`.
    pub fn parse(query: &str) -> Result<Paging, ApiError> {
        let mut paging = Paging { limit: DEFAULT_LIMIT, descending: true, after: None };
        for (name, value) in query.split('&').filter_map(|p| p.split_once('=')) {
            match name {
                "limit" => {
                    paging.limit = value.parse().ok().filter(|n| (1..=MAX_LIMIT).contains(n)).ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "Invalid 'limit': '{value}'. Expected an integer between 1 and {MAX_LIMIT}."
                        ))
                    })?;
                }
                "order" => {
                    paging.descending = match value {
                        "asc" => false,
                        "desc" => true,
                        _ => {
                            let message = format!("Invalid 'order': '{value}'. Expected 'asc' or 'desc'.");
                            return Err(ApiError::bad_request(message));
                        }
                    };
                }
                "after" if !value.is_empty() => paging.after = Some(value.to_string()),
                _ => {}
            }
        }
        Ok(paging)
    }

    /// The list object of `items` (in input order) for this page.
    ///
    /// # Errors
    /// 400 when `after` names no item of the list.
    pub fn page(&self, mut items: Vec<Value>) -> Result<Value, ApiError> {
        if self.descending {
            items.reverse();
        }
        let start = match &self.after {
            None => 0,
            Some(after) => {
                let at = items.iter().position(|i| i.get("id").and_then(Value::as_str) == Some(after.as_str()));
                at.map(|i| i + 1)
                    .ok_or_else(|| ApiError::bad_request(format!("Invalid 'after': no input item has id '{after}'.")))?
            }
        };
        let rest: Vec<Value> = items.into_iter().skip(start).collect();
        let has_more = rest.len() > self.limit;
        let data: Vec<Value> = rest.into_iter().take(self.limit).collect();
        let id_of = |v: Option<&Value>| v.and_then(|i| i.get("id")).cloned().unwrap_or(Value::Null);
        Ok(json!({
            "object": "list",
            "first_id": id_of(data.first()),
            "last_id": id_of(data.last()),
            "has_more": has_more,
            "data": data,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(n: usize) -> Vec<Value> {
        (0..n).map(|i| json!({"id": format!("msg_{i}"), "type": "message"})).collect()
    }

    fn ids(page: &Value) -> Vec<&str> {
        page["data"].as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap()).collect()
    }

    #[test]
    fn pages_walk_both_orders() {
        let page = Paging::parse("").unwrap().page(items(3)).unwrap();
        assert_eq!(ids(&page), ["msg_2", "msg_1", "msg_0"]);
        assert_eq!((page["first_id"].as_str(), page["has_more"].as_bool()), (Some("msg_2"), Some(false)));
        let page = Paging::parse("order=asc&limit=2").unwrap().page(items(3)).unwrap();
        assert_eq!(
            (ids(&page), page["has_more"].as_bool(), page["last_id"].as_str()),
            (vec!["msg_0", "msg_1"], Some(true), Some("msg_1"))
        );
        let page = Paging::parse("order=asc&limit=2&after=msg_1&include[]=x").unwrap().page(items(3)).unwrap();
        assert_eq!((ids(&page), page["has_more"].as_bool()), (vec!["msg_2"], Some(false)));
        let empty = Paging::parse("after=msg_0").unwrap().page(items(3)).unwrap();
        assert_eq!((ids(&empty).len(), &empty["first_id"]), (0, &Value::Null));
    }

    #[test]
    fn bad_parameters_are_400() {
        for q in ["limit=0", "limit=101", "limit=x", "order=up"] {
            assert_eq!(Paging::parse(q).unwrap_err().status, 400, "{q}");
        }
        assert_eq!(Paging::parse("after=nope").unwrap().page(items(1)).unwrap_err().status, 400);
    }
}
