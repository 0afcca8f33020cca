// The seam between the engine and a transport between pipeline stages. The engine runs its own
// blocks and asks the link for the hidden rows that enter them and to pass on the rows that
// leave them; the logits of the last stage are shared with every stage, so that every process
// samples the same tokens and drives its engine through the same calls. Nothing here names a
// transport: src/dist/ implements it over MPI.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/base/status.h"
#include "core/model/loader.h"           // LoadedModel
#include "core/runtime/pipeline_plan.h"  // LayerRange

namespace petrel {

class PipelineLink {
 public:
  virtual ~PipelineLink() = default;
  virtual int rank() const = 0;     // this stage, 0 first
  virtual int n_ranks() const = 0;  // stages in all

  // This stage's blocks, chosen once the model is loaded. Every process chooses from the same
  // file, so all agree without talking.
  virtual Result<LayerRange> ChooseLayers(const LoadedModel& model) = 0;

  // The hidden rows leaving this stage, to the next one (`n_floats` floats).
  virtual Status SendRows(const float* rows, size_t n_floats) = 0;
  // The hidden rows entering this stage, from the previous one.
  virtual Status ReceiveRows(float* rows, size_t n_floats) = 0;
  // The last stage's output (logits or final hidden states), from it to every stage: `out`
  // holds them on the last stage and receives them on the others.
  virtual Status ShareOutput(float* out, size_t n_floats) = 0;

  // When the first stage leads (EngineOptions::pipeline_calls): the engine calls it made since
  // the last send, from it to every other stage. ReceiveCalls waits as long as the leader is
  // idle (a server without requests), so it has no deadline.
  virtual Status SendCalls(const std::vector<uint8_t>& calls) = 0;
  virtual Status ReceiveCalls(std::vector<uint8_t>* calls) = 0;
  // When the first stage leads, only it needs the output: the last stage sends it there, and
  // the first stage posts a receive for each pass and waits for them all once every pass of
  // the batch is on its way (so that the next pass's rows leave while later stages compute).
  virtual Status SendOutputToFirst(const float* out, size_t n_floats) = 0;
  virtual Status PostOutputReceive(float* out, size_t n_floats) = 0;
  virtual Status WaitOutputs() = 0;
  // Whether a transfer has failed (a neighbour gone or silent past the deadline): the pipeline
  // cannot run another pass.
  virtual bool failed() const = 0;
};

}  // namespace petrel
