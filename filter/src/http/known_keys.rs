//! [`KnownKeys`]: the VM's memo of accepted keys, tied to the configuration it was filled under.

use std::rc::Rc;

use ferrogate_core::auth::KeyMemo;
use ferrogate_core::config::Config;

/// A [`KeyMemo`] tied to the configuration it was filled under: holding a `Weak` keeps that
/// allocation's address from being reused, so a different configuration never matches.
#[derive(Default)]
pub(crate) struct KnownKeys {
    owner: std::rc::Weak<Config>,
    memo: KeyMemo,
}

impl KnownKeys {
    /// The memo for `config`, emptied first if it was filled under another configuration.
    pub(super) fn for_config(&mut self, config: &Rc<Config>) -> &mut KeyMemo {
        if !std::ptr::eq(self.owner.as_ptr(), Rc::as_ptr(config)) {
            self.memo.clear();
            self.owner = Rc::downgrade(config);
        }
        &mut self.memo
    }
}
