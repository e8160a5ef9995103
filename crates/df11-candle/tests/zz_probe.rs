use df11_candle::huffman::CodeTable;
#[test]
fn probe() {
    let mut counts: Vec<u64> = vec![];
    let (mut a, mut b) = (1u64, 1u64);
    for _ in 0..40 {
        counts.push(a);
        (a, b) = (b, a + b);
        let p: Vec<(u8, u64)> = counts.iter().enumerate().map(|(i, &c)| (i as u8, c)).collect();
        let t = CodeTable::dahuffman(&p);
        println!("{} symbols total {} max {}", counts.len(), counts.iter().sum::<u64>(), t.max_length());
    }
}
