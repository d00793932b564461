// Package checkpoint saves and loads sharded checkpoints of the distributed
// optimizer. A checkpoint loses nothing and loads at any data-parallel size.
// The package also exports and imports full-precision weights as one
// safetensors file.
//
// # Entry points
//
//   - Save writes a checkpoint, and Load reads one.
//   - Verify checks every byte of a checkpoint, offline.
//   - Latest names the newest checkpoint under a root.
//   - Export and OpenImport move weights out and in.
//   - ExportHF writes a checkpoint's model, offline, as Hugging Face style
//     safetensors files with an index. It writes BF16, or FP8 with the
//     scale tensors that inference engines read.
//
// Save, Load and Export are collective. Every rank calls them together, with
// the optimizer's communicator. The ranks must share the file system.
//
// # Layout on disk
//
//	root/
//	  latest                         "step-00001000\n": the newest complete checkpoint
//	  step-00001000/
//	    index.json                   written last, by rank 0
//	    rank-00000-of-00004.safetensors
//	    ...
//	    rank-00003-of-00004.safetensors
//	    rank-00000-of-00004.state    SaveOptions.RankState, when a rank gave one
//	  step-00002000.tmp/             a save in progress, or one that crashed
//
// Rank r's file holds the pieces of parameters that rank owned. For the
// elements [o, o+n) of the flattened parameter p, it holds these tensors,
// each of shape [n]:
//
//   - "p@o/master", in F32;
//   - "p@o/m", and for AdamW "p@o/v", in F32, or BF16 when the moments are
//     bfloat16.
//
// All masters come first, then all first moments, then all second moments.
// The file's safetensors metadata records the format, rank, world size and
// step. It also records the CRC-32C of every chunk of the data section. A
// chunk is SaveOptions.ChunkBytes long, 1 MiB by default.
//
// index.json holds the step, the world size, the configuration and the
// layout. It lists every parameter's saved pieces and the scalar state, with
// checksums of every file. See docs/DESIGN.md, "Note: checkpoint files",
// for its fields.
//
// Learning-rate schedules are functions of the step. So the step is their
// whole state.
//
// # Atomicity
//
// Every file is written under a temporary name, synced, and renamed into
// place. A crash or error at any point leaves latest naming the previous
// checkpoint, whole. The new one is then complete, or an incomplete staging
// directory step-N.tmp. Load refuses a staging directory with
// ErrIncomplete. The next save of that step removes it. See
// docs/DESIGN.md, "Note: checkpoint files", for the order of the steps.
//
// A save never moves latest backwards, unless SaveOptions.Rewind is set. It
// compares its step with the one latest names. When latest is missing or
// unreadable, it compares with the highest complete step directory. A save
// that would move backwards fails with ErrRewind.
//
// # Integrity
//
// A load at any world size reads, on each rank, only the pieces that rank
// now owns. No rank reads the whole state, yet every byte a rank uses is
// checked first. Headers and file sizes are checked against the index, and
// chunks against their CRC-32C. Verify checks everything, the SHA-256 of
// every file included.
//
// After loading, the FP8 parameters are cast from the loaded masters and
// all-gathered. Load compares a digest of them across ranks. Without a
// conversion, it also compares it with the digest recorded at save time. So
// a resume that skipped the gather, or cast differently, cannot go
// unnoticed.
//
// Readers open only regular files, without blocking. A named pipe, a
// device, a directory or a symbolic link loop is refused with ErrCorrupt
// where index.json, latest or a shard file belongs. index.json may hold at
// most MaxIndexBytes, and a chunk at most MaxChunkBytes. Verify checks
// everything Load checks of the index, the amax histories included.
//
// # Conversions
//
// The update rule must match, or Load fails with ErrRule. Every parameter
// of the optimizer must be saved with its shape. Load fails with
// ErrParamMissing or ErrShape otherwise.
//
// Another FP8 recipe, or other high-precision marks, is refused with
// ErrRecipe unless LoadOptions.ConvertRecipe is set. Masters are FP32
// whatever the recipe, so loading them is well defined. Amax histories
// describe casts under the old recipe. So a conversion seeds them again
// from the loaded masters, as New seeds them.
//
// Moments saved as bfloat16 load exactly into a float32 optimizer with
// LoadOptions.WidenMoments. Float32 moments never load into a bfloat16
// optimizer, as that would round them. Load fails with ErrMomentType.
//
// The shard files and the files Export writes are plain safetensors files.
// Any safetensors reader can read them.
package checkpoint
