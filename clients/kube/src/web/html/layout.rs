//! The page around every view: head, inline style (no external asset, no script), navigation,
//! and the escaping every piece of text goes through.

use std::fmt::Write as _;

/// Text escaped for HTML content and double-quoted attributes.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    esc_into(&mut out, s);
    out
}

/// Appends `s` escaped (see [`esc`]).
pub fn esc_into(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\n' => out.push_str("&#10;"),
            c => out.push(c),
        }
    }
}

/// `a/b` path segments escaped for a URL path (pod names are DNS labels; this is for safety).
pub fn url_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

const STYLE: &str = r#"
body{font:13px/1.35 system-ui,sans-serif;margin:0;color:#1d2430;background:#f6f7f9}
header{background:#1d2430;color:#fff;padding:8px 16px;display:flex;gap:18px;align-items:center}
header a,header button{color:#cfe3ff;text-decoration:none;background:none;border:0;font:inherit;cursor:pointer}
header b{font-size:15px}main{padding:12px 16px}
h2{font-size:15px;margin:18px 0 6px}table{border-collapse:collapse}
.tot td,.tot th{padding:2px 10px 2px 0;text-align:left}
.grid .row{display:flex;align-items:stretch;margin-bottom:2px;content-visibility:auto;contain-intrinsic-size:auto 40px}
.grid .row>b{flex:0 0 140px;padding:2px 8px 2px 0;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.grid .c{flex:0 0 178px;border:1px solid #c9ced6;padding:2px 4px;margin-right:2px;font-size:11px;background:#fff}
.grid .c i{display:block;height:3px;background:#3d7bd9;margin:0 -4px 2px;width:0}
.w1{width:10%!important}.w2{width:20%!important}.w3{width:30%!important}.w4{width:40%!important}
.w5{width:50%!important}.w6{width:60%!important}.w7{width:70%!important}.w8{width:80%!important}
.w9{width:90%!important}.w10{width:100%!important}
.grid .l1{background:#eaf3ea}.grid .l2{background:#fff4d6}.grid .l3{background:#fde0dc}
.grid .co{background:repeating-linear-gradient(45deg,#eee,#eee 4px,#fff 4px,#fff 8px);color:#777}
.grid .uh{border:2px solid #c0392b}.grid .un>b{color:#a05a00}
.grid small{color:#555}.tag{font-size:10px;padding:0 4px;border-radius:3px;background:#e5e8ee;margin-left:4px}
.pend td,.pend th,.tbl td,.tbl th{border-bottom:1px solid #dde1e7;padding:4px 8px;text-align:left;vertical-align:top}
.nearest{color:#a33;font-weight:600}.ok{color:#27713a}.error{color:#b00020;font-weight:600}
ul.reasons{margin:0;padding-left:16px}textarea{width:100%;max-width:760px;height:220px;font:12px monospace}
.chosen{background:#eaf3ea}.muted{color:#777}form.inline{display:inline}
"#;

/// A whole page. `base` leads back to the view's root from this page's path (`""` at the root,
/// `"../../"` at `pod/<ns>/<name>`): every link is relative, so the view works behind a proxy
/// that serves it under a path prefix.
pub fn page(title: &str, base: &str, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 2048);
    let home = if base.is_empty() { "./" } else { base };
    let _ = write!(
        out,
        "<!doctype html><html lang=en><head><meta charset=utf-8>\
         <meta name=viewport content=\"width=device-width\"><title>{} · gpusched</title>\
         <style>{STYLE}</style></head><body><header><b>gpusched</b>\
         <a href=\"{home}\">Cluster</a><a href=\"{base}what-if\">What if</a>\
         <form class=inline method=post action=\"{base}logout\"><button>Log out</button></form>\
         </header><main>",
        esc(title)
    );
    out.push_str(body);
    out.push_str("</main></body></html>");
    out
}

/// A page without navigation (the login page: nothing to navigate to without the token).
pub fn bare_page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>{} · gpusched</title>\
         <style>{STYLE}</style></head><body><header><b>gpusched</b></header><main>{body}</main>\
         </body></html>",
        esc(title)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_urls_are_escaped() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>\n"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;&#10;"
        );
        assert_eq!(url_segment("ns/a b"), "ns%2Fa%20b");
        assert_eq!(url_segment("pod-1.x"), "pod-1.x");
        let p = page("<t>", "../../", "<p>x</p>");
        assert!(p.contains("<title>&lt;t&gt; · gpusched</title>"));
        assert!(p.contains("href=\"../../what-if\""));
        assert!(page("t", "", "").contains("href=\"./\""));
    }
}
