//! MSCCL XML written and read: every attribute the executor's parser requires out, the
//! executor's limits enforced in.

use super::{Algo, Gpu, MscclError, Step, Tb};
use std::collections::BTreeMap;
use std::fmt::Write as _;

impl Algo {
    /// The XML, every attribute written.
    pub fn to_xml(&self) -> String {
        let mut x = String::new();
        let b = |v: bool| u8::from(v);
        let _ = writeln!(
            x,
            "<algo name=\"{}\" proto=\"{}\" nchannels=\"{}\" nchunksperloop=\"{}\" ngpus=\"{}\" coll=\"{}\" inplace=\"{}\" outofplace=\"{}\" minBytes=\"{}\" maxBytes=\"{}\">",
            escape(&self.name),
            self.proto,
            self.nchannels,
            self.nchunksperloop,
            self.gpus.len(),
            self.coll,
            b(self.inplace),
            b(self.outofplace),
            self.min_bytes,
            self.max_bytes
        );
        for (g, gpu) in self.gpus.iter().enumerate() {
            let _ = writeln!(
                x,
                "  <gpu id=\"{g}\" i_chunks=\"{}\" o_chunks=\"{}\" s_chunks=\"{}\">",
                gpu.i_chunks, gpu.o_chunks, gpu.s_chunks
            );
            for (t, tb) in gpu.tbs.iter().enumerate() {
                let _ = writeln!(
                    x,
                    "    <tb id=\"{t}\" send=\"{}\" recv=\"{}\" chan=\"{}\">",
                    tb.send, tb.recv, tb.chan
                );
                for (s, st) in tb.steps.iter().enumerate() {
                    let _ = writeln!(
                        x,
                        "      <step s=\"{s}\" type=\"{}\" srcbuf=\"{}\" srcoff=\"{}\" dstbuf=\"{}\" dstoff=\"{}\" cnt=\"{}\" depid=\"{}\" deps=\"{}\" hasdep=\"{}\"/>",
                        st.ty,
                        st.srcbuf,
                        st.srcoff,
                        st.dstbuf,
                        st.dstoff,
                        st.cnt,
                        st.depid,
                        st.deps,
                        b(st.hasdep)
                    );
                }
                x.push_str("    </tb>\n");
            }
            x.push_str("  </gpu>\n");
        }
        x.push_str("</algo>\n");
        x
    }

    /// Reads MSCCL XML as the executor does: every attribute required, ids in order,
    /// then [`Algo::check`].
    pub fn parse(text: &str) -> Result<Algo, MscclError> {
        parse(text)
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// A start or empty tag: name, attributes, self-closing, line.
struct Tag {
    name: String,
    attrs: BTreeMap<String, String>,
    close: bool,
    empty: bool,
    line: usize,
}

/// Splits the document into tags (the format has no text content).
fn tags(text: &str) -> Result<Vec<Tag>, MscclError> {
    let mut out = Vec::new();
    let mut rest = text;
    let mut offset = 0;
    let line_at = |off: usize| text[..off].matches('\n').count() + 1;
    while let Some(lt) = rest.find('<') {
        if !rest[..lt].trim().is_empty() {
            return Err(MscclError::Parse {
                line: line_at(offset),
                msg: "text outside tags".into(),
            });
        }
        let start = offset + lt;
        let after = &rest[lt..];
        let (end, skip) = if after.starts_with("<!--") {
            (after.find("-->").map(|e| e + 3), true)
        } else if after.starts_with("<?") {
            (after.find("?>").map(|e| e + 2), true)
        } else {
            (after.find('>').map(|e| e + 1), false)
        };
        let end = end.ok_or_else(|| MscclError::Parse {
            line: line_at(start),
            msg: "unterminated tag".into(),
        })?;
        if !skip {
            out.push(tag(&after[1..end - 1], line_at(start))?);
        }
        offset = start + end;
        rest = &text[offset..];
    }
    if !rest.trim().is_empty() {
        return Err(MscclError::Parse {
            line: line_at(offset),
            msg: "text after the last tag".into(),
        });
    }
    Ok(out)
}

fn tag(body: &str, line: usize) -> Result<Tag, MscclError> {
    let err = |m: String| MscclError::Parse { line, msg: m };
    let (close, body) = match body.strip_prefix('/') {
        Some(b) => (true, b),
        None => (false, body),
    };
    let (empty, body) = match body.strip_suffix('/') {
        Some(b) => (true, b),
        None => (false, body),
    };
    let body = body.trim();
    let name_end = body.find(char::is_whitespace).unwrap_or(body.len());
    let name = body[..name_end].to_string();
    let mut attrs = BTreeMap::new();
    let mut rest = body[name_end..].trim_start();
    while !rest.is_empty() {
        let eq = rest
            .find('=')
            .ok_or_else(|| err(format!("<{name}>: attribute without a value")))?;
        let key = rest[..eq].trim().to_string();
        let after = rest[eq + 1..].trim_start();
        let quote = after
            .chars()
            .next()
            .filter(|c| *c == '"' || *c == '\'')
            .ok_or_else(|| err(format!("<{name}>: attribute {key} is not quoted")))?;
        let close_q = after[1..]
            .find(quote)
            .ok_or_else(|| err(format!("<{name}>: attribute {key} is not closed")))?;
        let value = unescape(&after[1..1 + close_q]);
        if attrs.insert(key.clone(), value).is_some() {
            return Err(err(format!("<{name}>: attribute {key} twice")));
        }
        rest = after[close_q + 2..].trim_start();
    }
    Ok(Tag {
        name,
        attrs,
        close,
        empty,
        line,
    })
}

fn attr<T: std::str::FromStr>(t: &Tag, key: &str) -> Result<T, MscclError> {
    let v = t.attrs.get(key).ok_or_else(|| MscclError::Parse {
        line: t.line,
        msg: format!("Attribute {key} not found in <{}>", t.name),
    })?;
    v.parse().map_err(|_| MscclError::Parse {
        line: t.line,
        msg: format!("<{}> attribute {key}: cannot read '{v}'", t.name),
    })
}

/// The executor indexes gpus, threadblocks and steps by position: ids must count up.
fn in_order(t: &Tag, key: &str, expected: usize, what: &str) -> Result<(), MscclError> {
    if attr::<usize>(t, key)? != expected {
        return Err(MscclError::Parse {
            line: t.line,
            msg: format!("{what} must be 0, 1, ... in order"),
        });
    }
    Ok(())
}

fn parse(text: &str) -> Result<Algo, MscclError> {
    let tags = tags(text)?;
    let mut it = tags.into_iter().peekable();
    let expect = |t: Option<Tag>, name: &str, close: bool| -> Result<Tag, MscclError> {
        match t {
            Some(t) if t.name == name && t.close == close => Ok(t),
            Some(t) => Err(MscclError::Parse {
                line: t.line,
                msg: format!(
                    "expected <{}{name}>, found <{}{}>",
                    if close { "/" } else { "" },
                    if t.close { "/" } else { "" },
                    t.name
                ),
            }),
            None => Err(MscclError::Parse {
                line: 0,
                msg: format!("missing <{name}>"),
            }),
        }
    };
    let a = expect(it.next(), "algo", false)?;
    let ngpus: u32 = attr(&a, "ngpus")?;
    let bool_attr = |t: &Tag, k: &str| -> Result<bool, MscclError> { Ok(attr::<u8>(t, k)? != 0) };
    let mut algo = Algo {
        name: attr(&a, "name")?,
        proto: attr(&a, "proto")?,
        nchannels: attr(&a, "nchannels")?,
        nchunksperloop: attr(&a, "nchunksperloop")?,
        coll: attr(&a, "coll")?,
        inplace: bool_attr(&a, "inplace")?,
        outofplace: bool_attr(&a, "outofplace")?,
        min_bytes: attr(&a, "minBytes")?,
        max_bytes: attr(&a, "maxBytes")?,
        gpus: Vec::new(),
    };
    while it.peek().is_some_and(|t| t.name == "gpu" && !t.close) {
        let g = it.next().expect("peeked");
        in_order(&g, "id", algo.gpus.len(), "gpu ids")?;
        let mut gpu = Gpu {
            i_chunks: attr(&g, "i_chunks")?,
            o_chunks: attr(&g, "o_chunks")?,
            s_chunks: attr(&g, "s_chunks")?,
            tbs: Vec::new(),
        };
        while it.peek().is_some_and(|t| t.name == "tb" && !t.close) {
            let t = it.next().expect("peeked");
            in_order(&t, "id", gpu.tbs.len(), "tb ids")?;
            let mut tb = Tb {
                send: attr(&t, "send")?,
                recv: attr(&t, "recv")?,
                chan: attr(&t, "chan")?,
                steps: Vec::new(),
            };
            if !t.empty {
                while it.peek().is_some_and(|t| t.name == "step") {
                    let s = it.next().expect("peeked");
                    in_order(&s, "s", tb.steps.len(), "step numbers")?;
                    let buf = |k: &str| -> Result<char, MscclError> {
                        let v: String = attr(&s, k)?;
                        let mut c = v.chars();
                        match (c.next(), c.next()) {
                            (Some(b), None) => Ok(b),
                            _ => Err(MscclError::Parse {
                                line: s.line,
                                msg: format!("{k} '{v}' is not one letter"),
                            }),
                        }
                    };
                    tb.steps.push(Step {
                        ty: attr(&s, "type")?,
                        srcbuf: buf("srcbuf")?,
                        srcoff: attr(&s, "srcoff")?,
                        dstbuf: buf("dstbuf")?,
                        dstoff: attr(&s, "dstoff")?,
                        cnt: attr(&s, "cnt")?,
                        depid: attr(&s, "depid")?,
                        deps: attr(&s, "deps")?,
                        hasdep: bool_attr(&s, "hasdep")?,
                    });
                }
                expect(it.next(), "tb", true)?;
            }
            gpu.tbs.push(tb);
        }
        expect(it.next(), "gpu", true)?;
        algo.gpus.push(gpu);
    }
    expect(it.next(), "algo", true)?;
    if let Some(t) = it.next() {
        return Err(MscclError::Parse {
            line: t.line,
            msg: "content after </algo>".into(),
        });
    }
    if algo.gpus.len() != ngpus as usize {
        return Err(MscclError::Parse {
            line: a.line,
            msg: format!(
                "ngpus is {ngpus} but {} <gpu> elements follow",
                algo.gpus.len()
            ),
        });
    }
    algo.check()?;
    Ok(algo)
}
