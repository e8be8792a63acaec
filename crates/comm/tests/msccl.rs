//! MSCCL XML: emitted algorithms round-trip through our parser, respect the executor's
//! limits, and compute their collective when run on symbolic data.

use apiary_comm::msccl::{Algo, emit};
use apiary_comm::{Collective, plan, preset};

fn emitted(spec: &str, coll: Collective, k: Option<u64>) -> Algo {
    let t = preset(spec).unwrap();
    let topo = if coll == Collective::ReduceScatter {
        t.reversed()
    } else {
        t.clone()
    };
    let s = plan(&topo, k).unwrap();
    let a = emit(&t, &s, coll, spec, 32).unwrap_or_else(|e| panic!("{spec} {coll:?}: {e}"));
    let xml = a.to_xml();
    let back = Algo::parse(&xml).unwrap_or_else(|e| panic!("{spec}: {e}\n{xml}"));
    assert_eq!(back, a, "{spec}: round trip");
    assert_eq!(back.to_xml(), xml);
    back.execute()
        .unwrap_or_else(|e| panic!("{spec} {coll:?}: {e}"));
    a
}

#[test]
fn allgather_reduce_scatter_and_allreduce_execute_correctly() {
    for spec in [
        "ring:4",
        "bring:5",
        "star:4",
        "triangle",
        "torus:3x3",
        "dgx1",
        "dgx-h100:1",
        "mi250:1",
    ] {
        for coll in [
            Collective::Allgather,
            Collective::ReduceScatter,
            Collective::Allreduce,
        ] {
            if spec == "ring:4" && coll == Collective::Allreduce {
                continue;
            }
            emitted(spec, coll, None);
            emitted(spec, coll, Some(1));
        }
    }
    // A one-way ring cannot run its trees backwards.
    let t = preset("ring:4").unwrap();
    let e = emit(&t, &plan(&t, None).unwrap(), Collective::Allreduce, "x", 32).unwrap_err();
    assert!(e.to_string().contains("needs symmetric links"));
}

#[test]
fn two_box_schedules_fit_the_executor() {
    let a = emitted("dgx-h100:2", Collective::Allreduce, Some(1));
    assert_eq!(a.gpus.len(), 16);
    assert_eq!(a.nchunksperloop, 16);
    emitted("dgx-a100:2", Collective::Allgather, None);
    emitted("dgx-a100:2", Collective::Allreduce, None);
    emitted("dgx-h100:2", Collective::ReduceScatter, None);
}

#[test]
fn the_readme_example_parses_and_runs() {
    let xml = r#"<?xml version="1.0"?>
<algo name="ag2" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather"
      inplace="0" outofplace="1" minBytes="0" maxBytes="1099511627776">
  <gpu id="0" i_chunks="1" o_chunks="2" s_chunks="0">
    <tb id="0" send="1" recv="1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="r" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
    <tb id="1" send="-1" recv="-1" chan="0">
      <step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
  <!-- gpu 1 mirrors gpu 0 -->
  <gpu id="1" i_chunks="1" o_chunks="2" s_chunks="0">
    <tb id="0" send="0" recv="0" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="r" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
    <tb id="1" send="-1" recv="-1" chan="0">
      <step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>
"#;
    let a = Algo::parse(xml).unwrap();
    a.execute().unwrap();
}

#[test]
fn parser_errors_name_the_line_and_the_rule() {
    let a = emitted("ring:4", Collective::Allgather, None);
    let xml = a.to_xml();
    let missing = xml.replacen(" maxBytes=\"1099511627776\"", "", 1);
    let e = Algo::parse(&missing).unwrap_err().to_string();
    assert_eq!(
        e,
        "MSCCL XML line 1: Attribute maxBytes not found in <algo>"
    );
    let big = xml.replacen("cnt=\"1\"", "cnt=\"72\"", 1);
    assert!(
        Algo::parse(&big)
            .unwrap_err()
            .to_string()
            .contains("cnt 72 is not in 1..72")
    );
    let unclosed = xml.replacen("</gpu>", "", 1);
    assert!(
        Algo::parse(&unclosed)
            .unwrap_err()
            .to_string()
            .starts_with("MSCCL XML line")
    );
    let peer = xml.replacen("send=\"1\"", "send=\"9\"", 1);
    assert!(
        Algo::parse(&peer)
            .unwrap_err()
            .to_string()
            .contains("is not another rank")
    );
    // A receive nobody sends: the executor would hang; execute reports the deadlock.
    let mut a2 = a.clone();
    for g in &mut a2.gpus {
        for tb in &mut g.tbs {
            tb.steps.retain(|s| s.ty != "s");
        }
    }
    assert!(a2.execute().unwrap_err().to_string().contains("deadlock"));
}
