// The ledger's Merkle tree and signed checkpoints against published test
// vectors:
//   * transparency-dev/merkle testonly/constants.go (leaves, roots 0..8) and
//     cmd/proofgen/main.go (inclusion and consistency proofs; its leaf
//     numbers are 1-based, written here 0-based as RFC 9162 counts), the
//     same values as google/certificate-transparency
//     cpp/merkletree/merkle_tree_test.cc;
//   * golang.org/x/mod sumdb/note note_test.go (TestSign, TestOpen) and
//     sumdb/client_test.go (a checkpoint signed with a published key).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/crypto.h"
#include "ledger/ledger.h"
#include "ledger/merkle.h"
#include "ledger/note.h"

namespace claw::ledger {
namespace {

Hash H(std::string_view hex) {
  auto bytes = FromHex(hex);
  EXPECT_TRUE(bytes.ok()) << hex;
  return HashFromBytes(*bytes).value();
}

std::vector<Hash> Hs(std::initializer_list<std::string_view> hexes) {
  std::vector<Hash> out;
  for (auto h : hexes) out.push_back(H(h));
  return out;
}

std::string Hx(const Hash& h) { return ToHex(AsBytes(h)); }

const char* const kLeaves[] = {"",     "00",       "10",
                               "2021", "3031",     "40414243",
                               "5051525354555657", "606162636465666768696a6b6c6d6e6f"};

const char* const kRoots[] = {
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
};

MerkleTree EightLeaves() {
  MerkleTree tree;
  for (const char* hex : kLeaves) tree.Append(LeafHash(FromHex(hex).value()));
  return tree;
}

TEST(Merkle, HashesAsRfc6962) {
  EXPECT_EQ(Hx(LeafHash("")), "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d");
  EXPECT_EQ(Hx(LeafHash("L123456")),
            "395aa064aa4c29f7010acfe3f25db9485bbd4b91897b6ad7ad547639252b4d56");
  // google/certificate-transparency cpp/merkletree/tree_hasher_test.cc
  std::string left, right;
  for (int i = 0; i < 32; ++i) left += static_cast<char>(i), right += static_cast<char>(32 + i);
  EXPECT_EQ(Hx(NodeHash(HashFromBytes(left).value(), HashFromBytes(right).value())),
            "1a378704c17da31e2d05b6d121c2bb2c7d76f6ee6fa8f983e596c2d034963c57");
}

TEST(Merkle, RootsAtEverySizeMatchThePublishedOnes) {
  MerkleTree tree;
  EXPECT_EQ(Hx(tree.Root()), kRoots[0]);
  for (size_t i = 0; i < 8; ++i) {
    tree.Append(LeafHash(FromHex(kLeaves[i]).value()));
    EXPECT_EQ(Hx(tree.Root()), kRoots[i + 1]) << "size " << i + 1;
  }
  for (uint64_t size = 0; size <= 8; ++size) EXPECT_EQ(Hx(tree.Root(size).value()), kRoots[size]);
  EXPECT_FALSE(tree.Root(9).ok());
}

struct InclusionVector {
  uint64_t index, size;
  std::vector<Hash> path;
};

TEST(Merkle, InclusionProofsMatchThePublishedOnesAndVerify) {
  const std::vector<InclusionVector> vectors = {
      {0, 1, {}},
      {0, 8,
       Hs({"96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
           "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
           "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"})},
      {5, 8,
       Hs({"bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
           "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
           "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"})},
      {2, 3, Hs({"fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"})},
      {1, 5,
       Hs({"6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
           "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
           "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"})},
  };
  const MerkleTree tree = EightLeaves();
  for (const auto& v : vectors) {
    auto proof = tree.InclusionProof(v.index, v.size);
    ASSERT_TRUE(proof.ok());
    EXPECT_EQ(*proof, v.path) << v.index << " of " << v.size;
    EXPECT_TRUE(VerifyInclusion(v.index, v.size, tree.leaf(v.index), v.path, H(kRoots[v.size])).ok());
  }
}

TEST(Merkle, EveryInclusionProofOfEveryTreeUpToFortyVerifies) {
  MerkleTree tree;
  for (int i = 0; i < 40; ++i) tree.Append(LeafHash("entry " + std::to_string(i)));
  for (uint64_t size = 1; size <= 40; ++size) {
    const Hash root = tree.Root(size).value();
    for (uint64_t i = 0; i < size; ++i) {
      auto proof = tree.InclusionProof(i, size).value();
      ASSERT_TRUE(VerifyInclusion(i, size, tree.leaf(i), proof, root).ok()) << i << "/" << size;
    }
  }
}

TEST(Merkle, AChangedEntryOrAWrongPlaceOrAShortProofIsDetected) {
  const MerkleTree tree = EightLeaves();
  const Hash root = tree.Root();
  auto proof = tree.InclusionProof(5, 8).value();
  // A changed entry: its leaf hash differs.
  EXPECT_EQ(VerifyInclusion(5, 8, LeafHash("forged"), proof, root).code(),
            StatusCode::kPermissionDenied);
  // The right entry claimed at another index.
  EXPECT_FALSE(VerifyInclusion(4, 8, tree.leaf(5), proof, root).ok());
  // Against another size's root.
  EXPECT_FALSE(VerifyInclusion(5, 7, tree.leaf(5), proof, H(kRoots[7])).ok());
  // A hash of the path changed, one dropped, one added.
  auto bad = proof;
  bad[1][0] ^= 1;
  EXPECT_FALSE(VerifyInclusion(5, 8, tree.leaf(5), bad, root).ok());
  bad = proof;
  bad.pop_back();
  EXPECT_FALSE(VerifyInclusion(5, 8, tree.leaf(5), bad, root).ok());
  bad = proof;
  bad.push_back(root);
  EXPECT_FALSE(VerifyInclusion(5, 8, tree.leaf(5), bad, root).ok());
  EXPECT_EQ(VerifyInclusion(8, 8, tree.leaf(5), proof, root).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(tree.InclusionProof(8, 8).ok());
  EXPECT_FALSE(tree.InclusionProof(0, 9).ok());
}

struct ConsistencyVector {
  uint64_t old_size, new_size;
  std::vector<Hash> proof;
};

TEST(Merkle, ConsistencyProofsMatchThePublishedOnesAndVerify) {
  const std::vector<ConsistencyVector> vectors = {
      {1, 1, {}},
      {1, 8,
       Hs({"96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
           "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
           "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"})},
      {6, 8,
       Hs({"0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
           "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
           "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"})},
      {2, 5,
       Hs({"5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
           "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"})},
      {6, 7,
       Hs({"0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
           "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
           "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"})},
  };
  const MerkleTree tree = EightLeaves();
  for (const auto& v : vectors) {
    auto proof = tree.ConsistencyProof(v.old_size, v.new_size);
    ASSERT_TRUE(proof.ok());
    EXPECT_EQ(*proof, v.proof) << v.old_size << " -> " << v.new_size;
    EXPECT_TRUE(VerifyConsistency(v.old_size, v.new_size, H(kRoots[v.old_size]),
                                  H(kRoots[v.new_size]), v.proof)
                    .ok());
  }
}

TEST(Merkle, EveryConsistencyProofUpToFortyVerifies) {
  MerkleTree tree;
  for (int i = 0; i < 40; ++i) tree.Append(LeafHash("entry " + std::to_string(i)));
  for (uint64_t n = 0; n <= 40; ++n) {
    for (uint64_t m = 0; m <= n; ++m) {
      auto proof = tree.ConsistencyProof(m, n).value();
      ASSERT_TRUE(
          VerifyConsistency(m, n, tree.Root(m).value(), tree.Root(n).value(), proof).ok())
          << m << " -> " << n;
    }
  }
}

TEST(Merkle, ARewrittenOrTruncatedHistoryFailsTheConsistencyCheck) {
  const MerkleTree honest = EightLeaves();
  // The same log with entry 3 changed after a checkpoint at size 6 was
  // published: nothing the forger can send proves size 8 extends size 6.
  MerkleTree forged;
  for (size_t i = 0; i < 8; ++i) {
    forged.Append(LeafHash(i == 3 ? std::string("changed") : FromHex(kLeaves[i]).value()));
  }
  const Hash old_root = honest.Root(6).value();
  auto proof = forged.ConsistencyProof(6, 8).value();
  EXPECT_EQ(VerifyConsistency(6, 8, old_root, forged.Root(), proof).code(),
            StatusCode::kPermissionDenied);
  // An entry removed: the log of 7 does not extend the published 8.
  EXPECT_EQ(VerifyConsistency(8, 7, honest.Root(), honest.Root(7).value(), {}).code(),
            StatusCode::kInvalidArgument);
  // Two roots for one size.
  EXPECT_FALSE(VerifyConsistency(8, 8, honest.Root(), forged.Root(), {}).ok());
  // A correct proof with one hash flipped.
  auto good = honest.ConsistencyProof(6, 8).value();
  good[2][31] ^= 0x80;
  EXPECT_FALSE(VerifyConsistency(6, 8, old_root, honest.Root(), good).ok());
  EXPECT_FALSE(VerifyConsistency(6, 8, old_root, honest.Root(), {}).ok());
}

// ---- signed notes ----------------------------------------------------------

constexpr std::string_view kPeterSigner =
    "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz";
constexpr std::string_view kPeterVerifier =
    "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW";
constexpr std::string_view kText =
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n";
constexpr std::string_view kSignedText =
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
    "\n"
    "\xE2\x80\x94 PeterNeumann "
    "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n";

TEST(SignedNote, SignsByteForByteAsGoSumdbNote) {
  auto signer = ParseSignerKey(kPeterSigner);
  ASSERT_TRUE(signer.ok()) << signer.status().ToString();
  EXPECT_EQ(signer->name, "PeterNeumann");
  EXPECT_EQ(FormatSignerKey(signer->name, signer->secret_key).value(), kPeterSigner);
  EXPECT_EQ(FormatVerifierKey(signer->name, signer->secret_key.substr(32)).value(), kPeterVerifier);
  auto note = SignNote(kText, signer->name, signer->secret_key);
  ASSERT_TRUE(note.ok());
  EXPECT_EQ(*note, kSignedText);
}

TEST(SignedNote, OpensANoteSignedByTheKeyAndIgnoresOtherSigners) {
  auto verifier = ParseVerifierKey(kPeterVerifier);
  ASSERT_TRUE(verifier.ok());
  EXPECT_EQ(verifier->hash, 0xc74f20a3u);
  EXPECT_EQ(OpenNote(kSignedText, *verifier).value(), kText);
  // golang.org/x/mod sumdb/note example_test.go: a second signature first.
  std::string two(kText);
  two += "\n\xE2\x80\x94 EnochRoot "
         "rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n";
  two += std::string(kSignedText.substr(kText.size() + 1));
  EXPECT_EQ(OpenNote(two, *verifier).value(), kText);
  auto enoch = ParseVerifierKey("EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop");
  ASSERT_TRUE(enoch.ok());
  EXPECT_EQ(OpenNote(two, *enoch).value(), kText);
}

TEST(SignedNote, AChangedTextOrSignatureOrAMalformedNoteIsRefused) {
  auto verifier = ParseVerifierKey(kPeterVerifier).value();
  std::string changed(kSignedText);
  changed[3] = 'X';
  EXPECT_EQ(OpenNote(changed, verifier).status().code(), StatusCode::kPermissionDenied);
  // note_test.go: "ABCD" inserted at byte 60 of the signature line.
  std::string sig(kSignedText);
  sig.insert(kText.size() + 1 + 60, "ABCD");
  EXPECT_FALSE(OpenNote(sig, verifier).ok());
  EXPECT_EQ(OpenNote(kText, verifier).status().code(), StatusCode::kInvalidArgument);
  std::string no_newline(kSignedText);
  no_newline.pop_back();
  EXPECT_EQ(OpenNote(no_newline, verifier).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenNote("\x01" + std::string(kSignedText), verifier).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenNote(std::string(kSignedText) + "trailing\n", verifier).status().code(),
            StatusCode::kInvalidArgument);
  // Signed by another key only.
  auto other = GenerateSigningKey();
  auto note = SignNote(kText, "PeterNeumann", other.secret_key).value();
  EXPECT_EQ(OpenNote(note, verifier).status().code(), StatusCode::kPermissionDenied);
  std::string many(kText);
  many += "\n";
  for (int i = 0; i < 101; ++i) many += std::string(kSignedText.substr(kText.size() + 1));
  EXPECT_EQ(OpenNote(many, verifier).status().code(), StatusCode::kInvalidArgument);
}

TEST(SignedNote, BadKeysAreRefusedWithTheReason) {
  EXPECT_FALSE(ParseVerifierKey("PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/"
                                "LDE4izWy10TWBADKEY==")
                   .ok());
  EXPECT_FALSE(
      ParseVerifierKey("PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW").ok());
  EXPECT_FALSE(
      ParseVerifierKey("PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW").ok());
  for (size_t n = 0; n < kPeterVerifier.size(); ++n) {
    EXPECT_FALSE(ParseVerifierKey(kPeterVerifier.substr(0, n)).ok()) << n;
  }
  EXPECT_FALSE(FormatVerifierKey("a name", std::string(32, 'k')).ok());
  EXPECT_FALSE(FormatVerifierKey("a+b", std::string(32, 'k')).ok());
  EXPECT_FALSE(SignNote("no newline", "n", GenerateSigningKey().secret_key).ok());
  EXPECT_FALSE(SignNote("bell\x07\n", "n", GenerateSigningKey().secret_key).ok());
}

// ---- checkpoints -----------------------------------------------------------

TEST(Checkpoint, ASumdbCheckpointSignedWithAPublishedKeyIsReproduced) {
  // golang.org/x/mod sumdb/client_test.go
  auto signer =
      ParseSignerKey("PRIVATE+KEY+localhost.localdev/sumdb+00000c67+"
                     "AXu6+oaVaOYuQOFrf1V59JK1owcFlJcHwwXHDfDGxSPk");
  ASSERT_TRUE(signer.ok()) << signer.status().ToString();
  auto verifier = ParseVerifierKey(
      "localhost.localdev/sumdb+00000c67+AcTrnkbUA+TU4heY3hkjiSES/DSQniBqIeQ/YppAUtK6");
  ASSERT_TRUE(verifier.ok());
  const std::string text =
      "go.sum database tree\n6\nwc4SkQt52o5W2nQ8To2ARs+mWuUJjss+sdleoiqxMmM=\n";
  auto note = SignNote(text, signer->name, signer->secret_key).value();
  EXPECT_EQ(note, text +
                      "\n\xE2\x80\x94 localhost.localdev/sumdb "
                      "AAAMZ6oRNswlEZ6ZZhxrCvgl1MBy+nusq4JU+TG6Fe2NihWLqOzb+y2c2kzRLoCr4tvw9o36ucQEnhc20e4nA4Qc/wc=\n");
  auto checkpoint = ParseCheckpoint(OpenNote(note, *verifier).value());
  ASSERT_TRUE(checkpoint.ok());
  EXPECT_EQ(checkpoint->origin, "go.sum database tree");
  EXPECT_EQ(checkpoint->size, 6u);
  EXPECT_EQ(FormatCheckpoint(*checkpoint), text);
}

TEST(Checkpoint, MalformedCheckpointsNameTheLine) {
  EXPECT_FALSE(ParseCheckpoint("").ok());
  EXPECT_FALSE(ParseCheckpoint("origin\n12\n").ok());
  EXPECT_NE(ParseCheckpoint("\n12\nbjQLnP+zepicpUTmu3gKLHiQHT+zNzh2hRGjBhevoB0=\n")
                .status()
                .message()
                .find("line 1"),
            std::string::npos);
  for (const char* size : {"-1", "012", "x", "18446744073709551616", ""}) {
    auto c = ParseCheckpoint(std::string("o\n") + size + "\nbjQLnP+zepicpUTmu3gKLHiQHT+zNzh2hRGjBhevoB0=\n");
    EXPECT_NE(c.status().message().find("line 2"), std::string::npos) << size;
  }
  EXPECT_NE(ParseCheckpoint("o\n1\nYmFuYW5hcw==\n").status().message().find("line 3"),
            std::string::npos);
  EXPECT_FALSE(ParseCheckpoint("o\n1\nbjQLnP+zepicpUTmu3gKLHiQHT+zNzh2hRGjBhevoB0=").ok());
  auto ext = ParseCheckpoint("o\n1\nbjQLnP+zepicpUTmu3gKLHiQHT+zNzh2hRGjBhevoB0=\nextension\n");
  EXPECT_TRUE(ext.ok());
}

TEST(Ledger, ARestartedLedgerChecksItsEntriesAgainstTheLastCheckpointItSigned) {
  const NoteSigner signer{"example.org/log", GenerateSigningKey().secret_key};
  std::string remembered;
  Ledger first(signer, [&](const std::string& text) { remembered = text; });
  auto staged = first.Stage({"a", "b", "c"});
  ASSERT_TRUE(first.Commit(staged).ok());
  const std::string note = first.SignedCheckpoint();
  ASSERT_FALSE(remembered.empty());
  EXPECT_EQ(note.substr(0, remembered.size()), remembered);
  EXPECT_EQ(OpenNote(note, ParseVerifierKey(first.verifier_key()).value()).value(), remembered);

  Ledger same(signer);
  ASSERT_TRUE(same.Load(staged).ok());
  EXPECT_TRUE(same.CheckAgainst(remembered).ok());
  auto changed = staged;
  changed[1].data = "B";
  Ledger rewritten(signer);
  ASSERT_TRUE(rewritten.Load(changed).ok());
  EXPECT_NE(rewritten.CheckAgainst(remembered).message().find("an entry was changed"),
            std::string::npos);
  Ledger shorter(signer);
  ASSERT_TRUE(shorter.Load(std::span(staged).first(2)).ok());
  EXPECT_NE(shorter.CheckAgainst(remembered).message().find("entries were removed"),
            std::string::npos);
  Ledger gap(signer);
  EXPECT_EQ(gap.Load(std::span(staged).subspan(1)).code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace claw::ledger
