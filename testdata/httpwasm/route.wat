;; Test guest of sidecar/tests/httpwasm_cmd_e2e.rs (route.wasm is this, assembled): copies
;; request header `x-backend` into the routing header `x-ferrogate-cluster`, and replaces the
;; request body with `rewritten` when `x-rewrite` is present (Content-Length left stale, as
;; host-go leaves it). Assemble with: wat2wasm route.wat -o route.wasm (or the `wat` crate).
(module
  (import "http_handler" "get_header_values" (func $get_header_values (param i32 i32 i32 i32 i32) (result i64)))
  (import "http_handler" "set_header_value" (func $set_header_value (param i32 i32 i32 i32 i32)))
  (import "http_handler" "write_body" (func $write_body (param i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 100) "x-backend")
  (data (i32.const 120) "x-ferrogate-cluster")
  (data (i32.const 160) "x-rewrite")
  (data (i32.const 180) "rewritten")
  (func (export "handle_request") (result i64) (local $r i64)
    (local.set $r (call $get_header_values (i32.const 0) (i32.const 100) (i32.const 9) (i32.const 1024) (i32.const 256)))
    (if (i64.ne (local.get $r) (i64.const 0))
      (then
        ;; one value: its length without the NUL terminator
        (call $set_header_value (i32.const 0) (i32.const 120) (i32.const 19) (i32.const 1024)
          (i32.sub (i32.wrap_i64 (local.get $r)) (i32.const 1)))))
    (if (i64.ne (call $get_header_values (i32.const 0) (i32.const 160) (i32.const 9) (i32.const 1024) (i32.const 0)) (i64.const 0))
      (then (call $write_body (i32.const 0) (i32.const 180) (i32.const 9))))
    (i64.const 1))
  (func (export "handle_response") (param i32 i32)))
