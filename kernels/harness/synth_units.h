// Synthetic units for df11_harness.cu (included after `Unit`): any prefix code with the format's
// LUT layout and gaps/positions decodes like the real thing. Written for this project.
#pragma once

// Synthetic units: any prefix code with the §2.3 LUT layout and §2.4 gaps/positions decodes like the real thing.
static bool build_luts(const int* len, const uint64_t* code, std::vector<uint8_t>& luts) {
    std::vector<std::pair<int, uint64_t>> pre;  // (bytes, prefix value)
    for (int s = 0; s < 256; ++s)
        for (int p = 1; len[s] > 8 && p <= (len[s] - 1) / 8; ++p) pre.push_back({p, code[s] >> (len[s] - 8 * p)});
    std::sort(pre.begin(), pre.end());
    pre.erase(std::unique(pre.begin(), pre.end()), pre.end());
    size_t K = pre.size() + 2;
    if (K > 18) return false;
    auto row_of = [&](int p, uint64_t v) {
        return 1 + (int)(std::lower_bound(pre.begin(), pre.end(), std::make_pair(p, v)) - pre.begin());
    };
    luts.assign(K * 256, 0);
    for (int s = 0; s < 256; ++s) {
        int L = len[s];
        if (!L) continue;
        uint64_t c = code[s];
        luts[(K - 1) * 256 + s] = (uint8_t)L;
        if (L <= 8) {
            for (uint64_t i = c << (8 - L); i < (c + 1) << (8 - L); ++i) luts[i] = (uint8_t)s;
            continue;
        }
        luts[c >> (L - 8)] = (uint8_t)(256 - row_of(1, c >> (L - 8)));
        for (int p = 1; p <= (L - 1) / 8; ++p) {
            int r = row_of(p, c >> (L - 8 * p)), rem = L - 8 * p;
            if (rem <= 8) {
                uint64_t cc = c & ((1ull << rem) - 1);
                for (uint64_t i = cc << (8 - rem); i < (cc + 1) << (8 - rem); ++i) luts[r * 256 + i] = (uint8_t)s;
            } else {
                luts[r * 256 + ((c >> (rem - 8)) & 255)] = (uint8_t)(256 - row_of(p + 1, c >> (rem - 8)));
            }
        }
    }
    return true;
}

static void huffman_lengths(std::vector<uint64_t> cnt, int* len) {
    for (;;) {
        typedef std::pair<uint64_t, int> Node;
        std::priority_queue<Node, std::vector<Node>, std::greater<Node>> q;
        std::vector<int> parent(512, -1);
        int next = 256, nsym = 0;
        for (int s = 0; s < 256; ++s)
            if (cnt[s]) q.push({cnt[s], s}), ++nsym;
        while (q.size() > 1) {
            Node a = q.top(); q.pop();
            Node b = q.top(); q.pop();
            parent[a.second] = parent[b.second] = next;
            q.push({a.first + b.first, next++});
        }
        int mx = 0;
        for (int s = 0; s < 256; ++s) {
            len[s] = 0;
            if (!cnt[s]) continue;
            for (int x = s; parent[x] >= 0; x = parent[x]) ++len[s];
            if (nsym == 1) len[s] = 1;
            mx = std::max(mx, len[s]);
        }
        if (mx <= 32) return;
        for (auto& c : cnt) if (c) c = (c + 1) / 2;  // flatten and retry
    }
}

static void canonical(const int* len, uint64_t* code) {
    std::vector<int> order;
    for (int s = 0; s < 256; ++s) if (len[s]) order.push_back(s);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return len[a] != len[b] ? len[a] < len[b] : a < b; });
    uint64_t c = 0;
    int prev = order.empty() ? 0 : len[order[0]];
    for (int s : order) { c <<= (len[s] - prev); prev = len[s]; code[s] = c++; }
}

// Encode exponents with the code; fills codes, gaps, positions.
static void encode(const std::vector<uint8_t>& ex, const int* len, const uint64_t* code, Unit& u) {
    size_t n = ex.size();
    uint64_t total = 0;
    for (size_t i = 0; i < n; ++i) total += len[ex[i]];
    size_t nbytes = (total + 7) / 8, NB = (nbytes + 4095) / 4096;
    u.codes.assign(nbytes, 0);
    std::vector<uint8_t> gap(512 * NB, 0);
    u.pos.assign(NB + 1, (uint32_t)n);
    uint64_t bit = 0;
    int64_t last_w = -1;
    size_t next_b = 0;
    for (size_t i = 0; i < n; ++i) {
        int L = len[ex[i]];
        uint64_t c = code[ex[i]];
        int64_t w = bit >> 6;
        if (w != last_w) gap[w] = bit & 63, last_w = w;
        while (next_b <= (bit >> 15)) u.pos[next_b++] = (uint32_t)i;
        for (int k = L - 1; k >= 0; --k, ++bit)
            if ((c >> k) & 1) u.codes[bit >> 3] |= 0x80 >> (bit & 7);
    }
    u.gaps.assign(320 * NB, 0);
    for (size_t t = 0; t < 512 * NB; ++t)
        for (int k = 0; k < 5; ++k)
            if ((gap[t] >> (4 - k)) & 1) u.gaps[(5 * t + k) >> 3] |= 0x80 >> ((5 * t + k) & 7);
}

static uint16_t f2bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static void finish(Unit& u, const std::vector<uint16_t>& w, std::vector<uint8_t>& ex) {
    size_t n = w.size();
    u.sm.resize(n);
    ex.resize(n);
    for (size_t i = 0; i < n; ++i) {
        u.sm[i] = (uint8_t)(((w[i] >> 8) & 0x80) | (w[i] & 0x7f));
        ex[i] = (uint8_t)((w[i] >> 7) & 0xff);
    }
    u.expected = w;
}

static void synth_normal(size_t n, uint64_t seed, Unit& u) {
    std::vector<uint16_t> w(n);
    unsigned nt = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
    std::vector<std::thread> th;
    for (unsigned k = 0; k < nt; ++k)
        th.emplace_back([&, k] {
            std::mt19937_64 rng(seed * 1000003 + k);
            std::normal_distribution<float> nd(0.0f, 0.02f);
            for (size_t i = k; i < n; i += nt) w[i] = f2bf(nd(rng));
        });
    for (auto& t : th) t.join();
    std::vector<uint8_t> ex;
    finish(u, w, ex);
    std::vector<uint64_t> cnt(256, 0);
    for (uint8_t e : ex) cnt[e]++;
    int len[256];
    uint64_t code[256] = {0};
    huffman_lengths(cnt, len);
    canonical(len, code);
    if (!build_luts(len, code, u.luts)) { fprintf(stderr, "too many LUT rows\n"); exit(2); }
    encode(ex, len, code, u);
}

// Code lengths 1..31 for symbols 100..130, 32 for 131 and 132 (complete code; K = 5, 4-level chains).
static void synth_stress(uint64_t seed, Unit& u) {
    int len[256] = {0};
    uint64_t code[256] = {0};
    for (int i = 0; i < 31; ++i) len[100 + i] = i + 1;
    len[131] = len[132] = 32;
    canonical(len, code);
    build_luts(len, code, u.luts);
    std::mt19937_64 rng(seed);
    std::vector<uint16_t> w;
    auto push = [&](int sym) { uint32_t sm = rng() & 0xff; w.push_back((uint16_t)(((sm & 0x80) << 8) | (sym << 7) | (sm & 0x7f))); };
    for (int i = 0; i < 70001; ++i) push(100);                                 // 1-bit codes: 32768-element blocks
    for (int i = 0; i < 30000; ++i) push(100 + (int)(rng() % 33));             // long codes, 4-level chains
    for (int i = 0; i < 50000; ++i) {                                           // geometric mix
        int k = 0;
        while (k < 32 && (rng() & 1)) ++k;
        push(k == 32 ? 132 : 100 + k);
    }
    for (int i = 0; i < 3001; ++i) push(100 + (int)(rng() % 4));               // odd tail
    std::vector<uint8_t> ex;
    finish(u, w, ex);
    encode(ex, len, code, u);
}

static void dump_unit(const Unit& u, const std::string& dir) {
    std::string d = dir + "/" + u.name;
    if (system(("mkdir -p '" + d + "'").c_str()) != 0) return;
    write_file(d + "/luts.bin", u.luts.data(), u.luts.size());
    write_file(d + "/encoded_exponent.bin", u.codes.data(), u.codes.size());
    write_file(d + "/sign_mantissa.bin", u.sm.data(), u.sm.size());
    write_file(d + "/gaps.bin", u.gaps.data(), u.gaps.size());
    write_file(d + "/output_positions.bin", u.pos.data(), u.pos.size() * 4);   // x86: little-endian
    write_file(d + "/expected.bin", u.expected.data(), u.expected.size() * 2);
}


