//! Tests of redaction: every documented shape, in argv and text form, by example and by
//! property; ordinary ML command lines left alone.
use super::*;
use proptest::prelude::*;

fn v(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

#[test]
fn flags_with_secrets_are_redacted() {
    let out = redact_args(&v(&[
        "python",
        "serve.py",
        "--token=abc123",
        "--api-key",
        "k-999",
        "--model",
        "qwen",
        "HF_TOKEN=hf_abcdefghijklmnop",
        "https://user:pw@example.org/x",
        "--password",
        "p",
    ]));
    let joined = out.join(" ");
    for secret in ["abc123", "k-999", "hf_abcdefghijklmnop", "user:pw", " p "] {
        assert!(!joined.contains(secret), "{secret} leaked in {joined}");
    }
    assert!(joined.contains("--model qwen"));
    assert!(joined.contains("example.org/x"));
    assert_eq!(out[2], format!("--token={REDACTED}"));
}

#[test]
fn every_shape_of_issue_9() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["curl", "-H", "Authorization: Bearer S3CRETa"],
            "curl -H Authorization: Bearer «redacted»",
        ),
        (
            &["curl", "-H", "Authorization:", "Bearer", "S3CRETa"],
            "curl -H Authorization: Bearer «redacted»",
        ),
        (
            &["curl", "-H", "X-Api-Key: S3CRETa"],
            "curl -H X-Api-Key: «redacted»",
        ),
        (&["x", "--db-pass=S3CRETa"], "x --db-pass=«redacted»"),
        (
            &["x", "--passphrase", "S3CRETa"],
            "x --passphrase «redacted»",
        ),
        (
            &["x", "--hf-token", "S3CRETa", "--tokenizer", "meta/llama"],
            "x --hf-token «redacted» --tokenizer meta/llama",
        ),
        (
            &[
                "x",
                "--client-secret=S3CRETa",
                "--max-num-batched-tokens",
                "8192",
            ],
            "x --client-secret=«redacted» --max-num-batched-tokens 8192",
        ),
        (&["x", "--ssh-key", "S3CRETa"], "x --ssh-key «redacted»"),
        (
            &["x", "--config", r#"{"api_key": "S3CRETa", "model": "m"}"#],
            r#"x --config {"api_key": "«redacted»", "model": "m"}"#,
        ),
        (
            &["x", "--opts", "user=bob,password=S3CRETa,host=h"],
            "x --opts user=bob,password=«redacted»,host=h",
        ),
        (
            &["x", "https://h/p?access_token=S3CRETa&x=1"],
            "x https://h/p?access_token=«redacted»&x=1",
        ),
        (
            &["x", "https://h/b?sv=1&sig=S3CRETa"],
            "x https://h/b?sv=1&sig=«redacted»",
        ),
        (
            &["x", "--url=https://bob:S3CRETa@h:5432/db"],
            "x --url=https://«redacted»@h:5432/db",
        ),
        (&["x", "--no-auth", "--model", "m"], "x --no-auth --model m"),
        (
            &["curl", "-u", "bob:S3CRETa", "h"],
            "curl -u bob:«redacted» h",
        ),
        (
            &["curl", "--user=bob:S3CRETa"],
            "curl --user=bob:«redacted»",
        ),
    ];
    for (args, want) in cases {
        let got = redact_cmdline(&v(args));
        assert_eq!(&got, want, "{args:?}");
        assert_eq!(redact_text(&got), got, "re-redaction changes nothing");
        assert_eq!(redact_text(&args.join(" ")), *want, "text form of {args:?}");
    }
}

#[test]
fn env_allow_list_and_secrets() {
    assert_eq!(
        redact_env("CUDA_VISIBLE_DEVICES", "1").as_deref(),
        Some("1")
    );
    assert_eq!(redact_env("HOME", "/root"), None);
    assert_eq!(redact_env("HF_TOKEN", "hf_x"), None);
    assert_eq!(redact_env("VLLM_API_KEY", "x").as_deref(), Some(REDACTED));
    assert_eq!(redact_env("NCCL_SECRET", "x").as_deref(), Some(REDACTED));
    let url = redact_env("TORCH_HUB_URL", "https://u:p@h/x").unwrap();
    assert!(!url.contains("u:p"), "{url}");
}

/// A secret in one of the shapes real command lines carry (`pick` chooses).
fn shaped(pick: usize, s: &str) -> Vec<String> {
    match pick % 14 {
        0 => vec!["-H".into(), format!("Authorization: Bearer {s}")],
        1 => vec!["-H".into(), format!("X-Api-Key: {s}")],
        2 => vec![
            "-H".into(),
            "Authorization:".into(),
            "Basic".into(),
            s.into(),
        ],
        3 => vec![format!("--db-password={s}")],
        4 => vec!["--auth-token".into(), s.into()],
        5 => vec!["--secret".into(), s.into()],
        6 => vec!["--private-key".into(), s.into()],
        7 => vec![format!("--json={{\"token\":\"{s}\",\"n\":1}}")],
        8 => vec![format!("{{'api_key': '{s}'}}")],
        9 => vec![format!("a=1;password={s};b=2")],
        10 => vec![format!("https://h/x?access_token={s}")],
        11 => vec![format!("https://h/x?a=b&sig={s}")],
        12 => vec![format!("s3://me:{s}@bucket/key")],
        _ => vec![format!("HF_TOKEN={s}")],
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn no_shape_leaks_in_argv_or_text(
        secret in "S3cr[A-Za-z0-9]{6,24}",
        before in proptest::collection::vec("[a-z]{1,8}|--[a-z]{2,8}", 0..4),
        after in proptest::collection::vec("[a-z]{1,8}|--model", 0..4),
        pick in 0usize..14,
    ) {
        let shape = shaped(pick, &secret);
        let mut args = before.clone();
        args.extend(shape);
        args.extend(after.clone());
        let table = redact_cmdline(&args);
        prop_assert!(!table.contains(&secret), "argv leak: {}", table);
        let text = redact_text(&args.join(" "));
        prop_assert!(!text.contains(&secret), "text leak: {}", text);
        // The report re-redaction pass leaves collected data alone.
        prop_assert_eq!(redact_text(&text), text.clone());
        prop_assert!(!redact_text(&table).contains(&secret));
    }

    #[test]
    fn idempotent_on_anything(args in proptest::collection::vec("\\PC{0,20}", 0..6)) {
        let once = redact_args(&args);
        prop_assert_eq!(redact_args(&once), once.clone());
        let t = args.join(" ");
        let once = redact_text(&t);
        prop_assert_eq!(redact_text(&once), once);
    }
}

/// Issue 19, item 8: the shapes that leaked, by example, in argv and text form.
#[test]
fn every_shape_of_issue_19() {
    let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq9S3cr3tK3yB0dy\nQ29udGVudE9mVGhlS2V5PT0=\n-----END RSA PRIVATE KEY-----";
    let cases: &[(&[&str], &str)] = &[
        (&["mysql", "-uroot", "-pS3CRETa", "db"], "S3CRETa"),
        (&["/usr/bin/mysqldump", "-pS3CRETa"], "S3CRETa"),
        (&["sshpass", "-p", "S3CRETa", "ssh", "h"], "S3CRETa"),
        (&["sshpass", "-pS3CRETa", "ssh", "h"], "S3CRETa"),
        (&["x", "--pw", "S3CRETa"], "S3CRETa"),
        (&["x", "--pw=S3CRETa"], "S3CRETa"),
        (&["x", "--db-pw=S3CRETa"], "S3CRETa"),
        (&["x", "--key-data", pem], "MIIEowIBAAKCAQEA"),
        (&["x", pem], "MIIEowIBAAKCAQEA"),
        (
            &["401", "Unauthorized:", "Bearer", "eyZ0aGlzIGlz9QK"],
            "eyZ0aGlzIGlz9QK",
        ),
        (
            &["x", "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"],
            "AIzaSyA1b2",
        ),
        (
            &["x", "npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"],
            "a1B2c3D4e5",
        ),
        (
            &["x", "--stripe", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"],
            "4eC39HqL",
        ),
        (&["x", "rk_live_4eC39HqLyjWDarjtT1zdp7dc"], "4eC39HqL"),
        (&["x", "sk_test_4eC39HqLyjWDarjtT1zdp7dc"], "4eC39HqL"),
        (
            &[
                "x",
                "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",
            ],
            "TwL2iGABf9",
        ),
        (
            &["x", "dapi0123456789abcdef0123456789abcdef"],
            "0123456789abcdef",
        ),
        (
            &["x", "ghs_16C7e42F292c6912E7710c838347Ae178B4a"],
            "16C7e42F",
        ),
        (&["x", "xoxe-1-My0xLTIzNDU2Nzg5MDEyMy0xMjM0"], "My0xLTIz"),
        (&["x", "ASIAY34FZKBOKMUTVV7A"], "Y34FZKBO"),
    ];
    for (args, secret) in cases {
        let args = v(args);
        let got = redact_cmdline(&args);
        assert!(!got.contains(secret), "{args:?} leaked: {got}");
        assert!(got.contains(REDACTED), "{args:?}: {got}");
        let text = redact_text(&args.join(" "));
        assert!(
            !text.contains(secret),
            "text form of {args:?} leaked: {text}"
        );
        assert_eq!(redact_text(&got), got, "re-redaction changes nothing");
    }
    // What the rules must leave alone.
    for args in [
        &["mysql", "-p", "mydb"][..],
        &["ssh", "-p2222", "host"],
        &["sshpass", "-pS3CRETa", "ssh", "-p", "22", "host"],
        &["docker", "run", "-p8080:80", "img"],
        &["echo", "Bearer", "token", "expired"],
        &["pip", "install", "sk-learn-intelex-extension-package-2024"],
    ] {
        let got = redact_cmdline(&v(args));
        for keep in [
            "mydb",
            "2222",
            "22 host",
            "8080:80",
            "token expired",
            "sk-learn-intelex-extension-package-2024",
        ] {
            if args.join(" ").contains(keep) {
                assert!(got.contains(keep), "{args:?}: {got}");
            }
        }
    }
    // The environment and stderr-style text go through the same shapes.
    assert_eq!(
        redact_env("NCCL_X", "sk_live_4eC39HqLyjWDarjtT1zdp7dc").as_deref(),
        Some(REDACTED)
    );
    let line = redact_text("requests.exceptions.HTTPError: 401 (Bearer hf0aB1cD2eF3gH4)");
    assert!(!line.contains("hf0aB1cD2eF3gH4"), "{line}");
}

/// A secret in each documented vendor shape (`pick` chooses), from a random body.
fn vendor_secret(pick: usize, body: &str, hex: &str) -> String {
    match pick % 14 {
        0 => format!("AIza{}", &body[..35]),
        1 => format!("npm_{}", &body[..36]),
        2 => format!("sk_live_{}", &body[..24]),
        3 => format!("rk_live_{}", &body[..24]),
        4 => format!("sk_test_{}", &body[..24]),
        5 => format!("SG.{}.{}", &body[..22], &body[22..65]),
        6 => format!("dapi{}", &hex[..32]),
        7 => format!("ghp_{}", &body[..36]),
        8 => format!("github_pat_{}", &body[..60]),
        9 => format!("xoxb-{}", &body[..40]),
        10 => format!(
            "AKIA{}",
            body[..16]
                .to_ascii_uppercase()
                .replace(['0', '1', '8', '9'], "7")
        ),
        11 => format!("hf_{}", &body[..34]),
        12 => format!("sk-proj-{}", &body[..48]),
        _ => format!("glpat-{}", &body[..20]),
    }
}

/// Where a secret appears: a bare argument, a flag value, a pair in a blob, a stderr line.
fn placed(place: usize, s: &str) -> Vec<String> {
    match place % 5 {
        0 => vec![s.into()],
        1 => vec![format!("--endpoint-key-x={s}")],
        2 => vec!["--config".into(), format!("a=1,b={s},c=2")],
        3 => vec!["error:".into(), "rejected".into(), format!("'{s}'")],
        _ => vec![format!("https://h/p?q={s}&x=1")],
    }
}

/// Ordinary ML command-line words that must come back unchanged.
fn ml_word(pick: usize, n: u32, hex: &str, name: &str) -> String {
    match pick % 10 {
        0 => format!("--lr={n}e-4"),
        1 => "3e-4".into(),
        2 => format!("meta-llama/Llama-3-{n}B"),
        3 => format!("/data/{name}/shard-{n:05}.safetensors"),
        4 => format!("ckpt-{hex}.pt"),
        5 => format!("runs/{name}-{}", &hex[..12]),
        6 => format!("--max-num-batched-tokens={n}"),
        7 => format!("sk-learn-{name}"),
        8 => "hf_transfer".into(),
        _ => format!("--tokenizer={name}/{name}-v{n}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Issue 19: a secret of each vendor shape never survives, wherever it is placed, in argv,
    /// text (stderr, report re-redaction) or an allowed environment value.
    #[test]
    fn vendor_shapes_never_survive(
        body in "[A-Za-z0-9]{70}",
        hex in "[0-9a-f]{32}",
        pick in 0usize..14,
        place in 0usize..5,
    ) {
        let secret = vendor_secret(pick, &body, &hex);
        let mut args = vec!["python".to_string(), "serve.py".to_string()];
        args.extend(placed(place, &secret));
        let table = redact_cmdline(&args);
        prop_assert!(!table.contains(&secret), "argv leak: {}", table);
        let text = redact_text(&args.join(" "));
        prop_assert!(!text.contains(&secret), "text leak: {}", text);
        prop_assert_eq!(redact_text(&text), text.clone());
        let env = redact_env("VLLM_X", &args.join(" ")).unwrap_or_default();
        prop_assert!(!env.contains(&secret), "env leak: {}", env);
    }

    /// Issue 19: PEM private keys, MySQL/sshpass `-p` passwords, `--pw` and a bare `Bearer`
    /// token never survive.
    #[test]
    fn argument_shapes_never_survive(
        secret in "S3cr[A-Za-z0-9]{8,24}",
        lines in proptest::collection::vec("[A-Za-z0-9+/]{64}", 1..4),
        pick in 0usize..6,
    ) {
        let pem = format!(
            "-----BEGIN OPENSSH PRIVATE KEY-----\n{secret}\n{}\n-----END OPENSSH PRIVATE KEY-----",
            lines.join("\n")
        );
        let args: Vec<String> = match pick {
            0 => vec!["mysql".into(), "-h".into(), "db".into(), format!("-p{secret}")],
            1 => vec!["sshpass".into(), "-p".into(), secret.clone(), "ssh".into(), "h".into()],
            2 => vec!["sshpass".into(), format!("-p{secret}"), "scp".into(), "a".into()],
            3 => vec!["tool".into(), "--pw".into(), secret.clone()],
            4 => vec!["tool".into(), "--identity".into(), pem.clone()],
            _ => vec!["curl:".into(), "sent".into(), "Bearer".into(), secret.clone()],
        };
        let table = redact_cmdline(&args);
        prop_assert!(!table.contains(&secret), "argv leak: {}", table);
        let text = redact_text(&args.join(" "));
        prop_assert!(!text.contains(&secret), "text leak: {}", text);
        for l in &lines {
            prop_assert!(!table.contains(l.as_str()) && !text.contains(l.as_str()));
        }
    }

    /// Issue 19: ordinary ML command lines (learning rates, model names, paths, checkpoint
    /// hashes, package names that share a vendor prefix) are not mangled.
    #[test]
    fn ml_command_lines_are_left_alone(
        picks in proptest::collection::vec((0usize..10, 1u32..99_999), 1..8),
        hex in "[0-9a-f]{40}",
        name in "[a-z]{3,10}",
    ) {
        let mut args = vec!["torchrun".to_string(), "train.py".to_string()];
        args.extend(picks.iter().map(|(p, n)| ml_word(*p, *n, &hex, &name)));
        let want = args.join(" ");
        prop_assert_eq!(redact_cmdline(&args), want.clone());
        prop_assert_eq!(redact_text(&want), want);
    }
}
