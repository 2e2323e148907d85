//! The flow-control queue's shared-data form (`Queue::decode`): decoding never panics, a
//! decoded queue encodes to bytes that decode to the same queue, and the service order holds
//! every entry once whatever the bytes said.
#![no_main]

use ferrogate_core::flow::Queue;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let queue = Queue::decode(data);
    assert_eq!(Queue::decode(&queue.encode()), queue);
    let mut order: Vec<u64> = queue.order().iter().map(|e| e.seq).collect();
    let mut all: Vec<u64> = queue.entries().iter().map(|e| e.seq).collect();
    order.sort_unstable();
    all.sort_unstable();
    assert_eq!(order, all);
});
