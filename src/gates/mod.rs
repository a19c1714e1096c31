//! What may hold a deployment before it runs, in one room: the judgement of a claimed
//! deployment (`judge.rs`: approvals, freezes, windows) and the admins' decisions that
//! change it (`decide.rs`), and the signed links that take an approver from a message to
//! the decision (`links.rs`). Their other layers are where every layer's part lives: the
//! settings in `config/gates.rs` and `config/windows.rs`, the rows in `store/gates.rs` and
//! `store/freezes.rs`, the routes and forms in `web/gates.rs`.

mod decide;
mod judge;
mod links;

pub(crate) use decide::{
    admin_by_token, approve, freeze, override_wait, parse_until, reject, unfreeze,
};
pub(crate) use judge::{Gate, check};
pub(crate) use links::{ApprovalLink, LinkAction, LinkError, LinkKey, LinkQuery};
