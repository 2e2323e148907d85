//! The query of `GET /v1/responses/{id}` and of its `input_items`: `include` is checked
//! against the values OpenAI defines and otherwise changes nothing (a stored response is kept
//! whole: reasoning keeps its `encrypted_content`, output text its `logprobs`, whenever the
//! provider gave them; built-in tools, whose results the other values add, are never run
//! here). `stream=true` (replaying a response as events) is refused by name.

use crate::openai::ApiError;

/// The `include` values OpenAI defines.
pub const KNOWN: [&str; 8] = [
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
];

/// Checks a retrieve or input-items query string (without `?`).
///
/// # Errors
/// 400 naming `include` for an unknown value, or `stream` for `stream=true`.
pub fn check(query: &str) -> Result<(), ApiError> {
    for (name, value) in query.split('&').filter_map(|p| p.split_once('=')) {
        match name {
            "include" | "include[]" | "include%5B%5D" | "include%5b%5d" if !KNOWN.contains(&value) => {
                let shown: String = value.chars().take(64).collect();
                let message = format!("Invalid 'include' value: '{shown}'. Supported values: {}.", KNOWN.join(", "));
                return Err(ApiError { param: Some("include"), ..ApiError::bad_request(message) });
            }
            "stream" if value == "true" => {
                let message = "'stream': true is not supported here: a stored response is read back whole.";
                return Err(ApiError { param: Some("stream"), ..ApiError::bad_request(message) });
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values_pass_and_others_are_named() {
        assert_eq!(check(""), Ok(()));
        assert_eq!(check("include%5B%5D=reasoning.encrypted_content&include[]=message.output_text.logprobs"), Ok(()));
        assert_eq!(check("stream=false&limit=3"), Ok(()));
        assert_eq!(check("include[]=nope").unwrap_err().param, Some("include"));
        assert_eq!(check("include=nope").unwrap_err().param, Some("include"));
        assert_eq!(check("stream=true").unwrap_err().param, Some("stream"));
    }
}
