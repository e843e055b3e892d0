//! A command as the vectors and the contract write it: its words.

/// Every word of a command, with a sliding log's fresh request id written `{request_id}`.
pub(crate) fn words(cmd: &redis::Cmd, ids: bool) -> Vec<String> {
    cmd.args_iter()
        .map(|a| match a {
            redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
            _ => "<other>".into(),
        })
        .map(|w| if ids && is_request_id(&w) { "{request_id}".into() } else { w })
        .collect()
}

/// The form of `command::request_id`: hex digits, a dash, hex digits.
fn is_request_id(word: &str) -> bool {
    let Some((run, seq)) = word.split_once('-') else { return false };
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
    hex(run) && hex(seq) && run.len() > 4
}
