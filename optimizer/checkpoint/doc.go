// Package checkpoint provides sharded checkpoints of the distributed
// optimizer that lose nothing and load at any data-parallel size, and the
// export and import of full-precision weights as one safetensors file.
//
// Save writes, Load reads, Verify checks every byte offline, Latest names
// the newest checkpoint under a root, Export and OpenImport move weights in
// and out. ExportHF writes a checkpoint's model, offline, as Hugging
// Face style safetensors files with an index, in BF16 or in FP8 with the
// scale tensors inference engines read (see ExportHF). Save, Load and Export are collective: every rank calls them
// together, with the optimizer's communicator; ranks must share the file
// system.
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
//	  step-00002000.tmp/             a save in progress, or one that crashed
//
// Rank r's file holds, for every piece of a parameter that rank owned (the
// elements [o, o+n) of the flattened parameter p), the tensors "p@o/master"
// (F32), "p@o/m" and, for AdamW, "p@o/v" (F32, or BF16 when the moments
// are bfloat16), each of shape [n]: all masters first, then all first
// moments, then all second moments. Its safetensors metadata records the
// format, rank, world size and step, and the CRC-32C of every chunk of the
// data section (SaveOptions.ChunkBytes, 1 MiB by default).
//
// index.json is {"format", "version", "body_sha256", "body"}: the body's
// SHA-256 is taken over its bytes as they are in the file. The body holds
// the step; the world size; the configuration (update rule, FP8 recipe,
// gradient, moment and high-precision types, loss scaling, groups); the
// layout (fingerprint, options, buckets); every parameter's name, shape,
// high-precision mark and saved pieces (rank, offset, length, tensor name),
// which tile the parameter exactly; the scalar state (step, loss scale and
// its count of good steps, and per FP8 parameter the amax history and the
// scale its held bytes were cast with, as float32 bit patterns so that
// NaN and Inf survive); per file its size, SHA-256 and the SHA-256 of its
// header; and digests of the gathered FP8 and high-precision parameters.
// Learning-rate schedules are functions of the step, so the step is their
// whole state.
//
// # Atomicity
//
// Every file is written under a temporary name, synced, renamed into place,
// and its directory synced. A save builds step-N.tmp; the shard files are
// complete before rank 0 writes the index; then rank 0 renames the
// directory to step-N, syncs root, and replaces latest the same way. A
// crash or error at any point leaves latest naming the previous checkpoint,
// whole, and the new one either complete (if the crash came after the
// directory rename) or an incomplete staging directory that Load refuses
// with ErrIncomplete and the next save of that step removes.
//
// A save never moves latest backwards without SaveOptions.Rewind: it
// compares its step with the one latest names or, when latest is missing
// or unreadable, with the highest complete step directory (ErrRewind).
//
// # Integrity
//
// A load at any world size reads, on each rank, only the pieces that rank
// now owns: per shard file it needs, the header (checked against the
// index's header checksum, and the file's size against the index), then
// whole chunks, each checked against its CRC-32C before a byte of it is
// used. No rank reads the whole state, yet every byte a rank uses is
// checked. Verify checks everything, SHA-256 of every file included. After
// loading, the FP8 parameters are cast from the loaded masters and
// all-gathered; Load compares a digest of them across ranks and, without a
// conversion, with the digest recorded at save time, so a resume that
// skipped the gather, or cast differently, cannot go unnoticed.
//
// Readers open only regular files, without blocking: a named pipe, a
// device, a directory or a symbolic link loop in place of index.json,
// latest or a shard file is refused with ErrCorrupt. index.json may hold
// at most MaxIndexBytes, a chunk at most MaxChunkBytes. Verify checks
// everything Load checks of the index, the amax histories included.
//
// # Conversions
//
// The update rule must match (ErrRule) and every parameter of the
// optimizer must be saved with its shape (ErrParamMissing, ErrShape).
// Another FP8 recipe (or other high-precision marks) is refused with
// ErrRecipe unless LoadOptions.ConvertRecipe: masters are FP32 whatever
// the recipe, so loading them is well defined; amax histories are not (they
// describe casts under the old recipe) and are re-seeded from the loaded
// masters as New seeds them. Moments saved as bfloat16 load into a float32
// optimizer exactly, with LoadOptions.WidenMoments; float32 moments never
// load into a bfloat16 optimizer, as that would round them (ErrMomentType).
//
// Files written by Export and the shard files are plain safetensors files:
// any safetensors reader can read them.
package checkpoint
