//! The `softib` command.
fn main() {}
