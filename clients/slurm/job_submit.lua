--[[
job_submit.lua of gpusched: keeps Slurm's accounting in step with gpusched's decisions.
slurm.conf: JobSubmitPlugins=lua, this file next to slurm.conf as job_submit.lua.
It makes no network call and reads only the request: slurmctld is never blocked by it.

- A job that asks for gpusched's count-only GRES (gpuslot, gpumem, gpucore) without a recorded
  decision (comment "gpusched/v1 ...") is refused: only gpusched-sbatch books them, so Slurm's
  counts never exceed what gpusched booked.
- Users (not root/SlurmUser) cannot change the comment, the node list, the excluded nodes or
  the GRES of a job that carries a decision, nor give a decision to a job later.
]]

local MARKER = "gpusched/v1"
local GRES = { "gpuslot", "gpumem", "gpucore" }

local function is_decision(comment)
	return comment ~= nil and string.sub(comment, 1, #MARKER) == MARKER
end

local function books_gpusched_gres(...)
	for _, value in ipairs({ ... }) do
		if value ~= nil then
			for _, name in ipairs(GRES) do
				if string.find(value, name, 1, true) then
					return true
				end
			end
		end
	end
	return false
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	if is_decision(job_desc.comment) then
		return slurm.SUCCESS
	end
	if books_gpusched_gres(job_desc.tres_per_node, job_desc.tres_per_job, job_desc.tres_per_task,
		job_desc.tres_per_socket) then
		slurm.log_user("gpusched: gpuslot/gpumem/gpucore are booked by gpusched-sbatch only; " ..
			"submit with: gpusched-sbatch --gres=gpu:<count> ...")
		return slurm.ERROR
	end
	return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	if modify_uid == 0 then
		return slurm.SUCCESS
	end
	local changes_decision = job_desc.comment ~= nil or job_desc.req_nodes ~= nil or
		job_desc.exc_nodes ~= nil or
		books_gpusched_gres(job_desc.tres_per_node, job_desc.tres_per_job, job_desc.tres_per_task,
			job_desc.tres_per_socket)
	if is_decision(job_rec.comment) and changes_decision then
		slurm.log_user("gpusched: job %u carries a gpusched decision; its comment, nodes and GRES " ..
			"cannot be changed (cancel it and submit again with gpusched-sbatch)", job_rec.job_id)
		return slurm.ESLURM_ACCESS_DENIED
	end
	if not is_decision(job_rec.comment) and (is_decision(job_desc.comment) or
			books_gpusched_gres(job_desc.tres_per_node)) then
		slurm.log_user("gpusched: only gpusched-sbatch books GPUs")
		return slurm.ESLURM_ACCESS_DENIED
	end
	return slurm.SUCCESS
end

return slurm.SUCCESS
