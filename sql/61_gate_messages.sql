-- Sentences of the exit gate, the execution report and the prompt rules.

INSERT INTO agentdb_private.messages AS m (code, lang, body) VALUES
('gate.no_tool', 'zh', '我这边还没有帮你办任何事,也没有记下任何内容。请用一句话告诉我要做什么、哪天、几点,我马上处理。'),
('gate.no_tool', 'en', 'I haven''t done anything yet and nothing was saved. Tell me in one sentence what to do, which day and what time, and I''ll take care of it.'),
('gate.not_done_yet', 'zh', '这件事我还没有办,什么都没有保存。请再发一次你的请求,我会马上去办,并告诉你结果。'),
('gate.not_done_yet', 'en', 'I haven''t done this yet, and nothing has been saved. Send your request again and I''ll do it right away and tell you how it went.'),
('gate.partial', 'zh', '只办成了一部分,实际结果如下:'),
('gate.partial', 'en', 'Only part of this went through. Here is what actually happened:'),
('gate.none_done', 'zh', '这次没有办成,实际结果如下:'),
('gate.none_done', 'en', 'This didn''t go through. Here is what actually happened:'),
('gate.correction', 'zh', '实际结果如下:'),
('gate.correction', 'en', 'Here is what actually happened:'),
('gate.unknown_task', 'zh', '这次请求没有找到对应的记录,什么都没有确认,请再发一次。'),
('gate.unknown_task', 'en', 'This request could not be matched to anything, so nothing is confirmed. Please send it again.'),
('report.title', 'zh', '执行报告(以数据库为准):'),
('report.title', 'en', 'Execution report (from the database):'),
('report.no_steps', 'zh', '本轮没有调用任何工具,什么都没有执行。'),
('report.no_steps', 'en', 'No tool was called in this turn; nothing was done.'),
('report.step.ok', 'zh', '{label}:成功,已核对。'),
('report.step.ok', 'en', '{Label}: succeeded and verified.'),
('report.step.failed', 'zh', '{label}:没有成功。{detail}'),
('report.step.failed', 'en', '{Label}: did not succeed. {detail}'),
('report.rules_title', 'zh', '回复规则:'),
('report.rules_title', 'en', 'Rules for your reply:'),
('report.rule.closed', 'zh', '工具已关闭,本轮不能再调用任何工具。'),
('report.rule.closed', 'en', 'Tools are closed: do not call any tool again in this turn.'),
('report.rule.successes', 'zh', '成功的操作直接说明,不要夸大。'),
('report.rule.successes', 'en', 'State each success plainly, without adding anything.'),
('report.rule.failures', 'zh', '每一个没成功的操作都要说明原因和下一步。'),
('report.rule.failures', 'en', 'State every failure, its reason and the next step.'),
('report.rule.not_created', 'zh', '重复或冲突的请求没有新建任何内容,不能说已创建。'),
('report.rule.not_created', 'en', 'A duplicate or a conflict created nothing: never call it created.'),
('rules.not_authenticated', 'zh', '当前用户未登录,任何写操作都会被拒绝。请引导用户先登录,不要声称已完成。'),
('rules.not_authenticated', 'en', 'The user is not logged in, so every write will be refused. Ask them to log in first and never say it is done.'),
('rules.no_permission', 'zh', '用户没有开启“{label}”的权限,这类操作会被拒绝;请告诉用户可以在设置里开启。'),
('rules.no_permission', 'en', 'The user has not allowed you to {label}; such actions will be refused. Tell them they can turn it on in settings.'),
('rules.closed', 'zh', '本轮工具已关闭,不要再调用任何工具。'),
('rules.closed', 'en', 'Tools are closed for this turn: call no tool.'),
('rules.claims', 'zh', '只有工具返回成功且已核对,才能说已完成;没有调用工具,就什么都没有完成。'),
('rules.claims', 'en', 'Say something is done only when a tool returned success and verified; without a tool call, nothing is done.')
ON CONFLICT (code, lang) DO UPDATE SET body = excluded.body;

-- Details that name the missing field by its everyday name, or offer an alternative.
INSERT INTO agentdb_private.messages AS m (code, lang, body) VALUES
('detail.invalid.named', 'zh', '没能{label}:“{field}”缺失或格式不对,请补充后再试。什么都没有改动。'),
('detail.invalid.named', 'en', 'Couldn''t {label}: "{field}" is missing or not in a form I could use. Please check it and try again; nothing was changed.'),
('detail.conflict.alternative', 'zh', '没能{label}:{reason}。可以改成{alternative}吗?什么都没有改动。'),
('detail.conflict.alternative', 'en', 'Couldn''t {label}: {reason}. Would {alternative} work instead? Nothing was changed.')
ON CONFLICT (code, lang) DO UPDATE SET body = excluded.body;
