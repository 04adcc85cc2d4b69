//! The numbers nvpeer's tools read and print, defined once for the harness (`nvpeer validate`,
//! `nvpeer bench`) and the emulator tools (`nvpeer emu`): byte sizes as users type them
//! ([`size`]) and summaries of timing samples ([`stats`]).

pub mod size;
pub mod stats;
